"""The ``ratchet`` command line: one module per command, each thin (parse, call the library, print).

Every module here has ``register(sub, parser_class)``, which adds its parser(s) with
``set_defaults(func=...)``; :func:`build_parser` calls them in the order of ``COMMANDS``. Helpers every
command shares live in :mod:`ratchet.cli.common`; nothing here is imported back by the library. Heavy
imports (torch above all) happen inside the command functions, so ``ratchet --help`` is instant.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from ratchet.cli.common import EXIT_USAGE, Parser, UsageError

# The order is the order of ``ratchet --help``.
COMMANDS = ("eval", "check", "run", "runs", "tasks", "hw", "idea", "context", "program", "mcp", "profile",
            "optimize", "export", "gate", "stack", "report", "dashboard", "doctor")


def _modules() -> list[str]:
    names = [f"ratchet.cli.{c}" for c in COMMANDS]
    return list(dict.fromkeys(names))


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("ratchet")
    except PackageNotFoundError:  # run from a source tree without an install
        return "unknown"


def build_parser() -> Parser:
    parser = Parser(prog="ratchet", description=(
        "Ratchet: autoresearch for the GPU kernels of LLM inference. A trusted judge checks every "
        "candidate kernel on fresh inputs and held-out shapes and times it against the task's reference."))
    parser.add_argument("--version", action="version", version=f"ratchet {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in _modules():
        importlib.import_module(name).register(sub, Parser)
    return parser


def _suggestion(parser: Parser, argv: list[str], message: str) -> str:
    """'did you mean' for a mistyped command or flag, and the help of the command it was given to."""
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = list(sub.choices)
    command = next((a for a in argv if not a.startswith("-")), None)
    if "invalid choice" in message and command is not None and command not in commands:
        close = difflib.get_close_matches(command, commands, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown command '{command}'{hint} (see 'ratchet --help')"
    if "unrecognized arguments" in message and command in commands:
        cmd = sub.choices[command]
        flags = [s for a in cmd._actions for s in a.option_strings]
        bad = [a.split("=")[0] for a in message.split(":", 1)[1].split() if a.startswith("-")]
        for flag in bad:
            close = difflib.get_close_matches(flag, flags, n=1)
            if close:
                return f"unknown option {flag} for 'ratchet {command}'; did you mean {close[0]}? " \
                       f"(see 'ratchet {command} --help')"
        return f"{message} (see 'ratchet {command} --help')"
    return message


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except UsageError as exc:
            raise UsageError(_suggestion(parser, argv, str(exc))) from None
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except KeyboardInterrupt:
        print("ratchet: interrupted", file=sys.stderr)
        return 130
    except OverflowError as exc:  # a number the user gave past what the ledger stores (SQLite: 64 bits)
        print(f"ratchet: error: a number is out of range ({exc})", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a path the user gave that cannot be used: too long, no permission, no space
        where = f": {str(exc.filename)[:200]}" if exc.filename else ""
        print(f"ratchet: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # one line for every error the library names as the user's
        if not _is_user_error(exc):
            raise
        print(f"ratchet: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE


def _is_user_error(exc: Exception) -> bool:
    if isinstance(exc, UsageError):
        return True
    from ratchet.candidate import CandidateError
    from ratchet.run.ledger import LedgerError
    from ratchet.task import TaskError

    if isinstance(exc, (TaskError, CandidateError, LedgerError)):
        return True
    if "ratchet.e2e.models" in sys.modules:  # only a command that loaded a MODEL can raise its error
        from ratchet.e2e.models import ModelError

        return isinstance(exc, ModelError)
    return False


if __name__ == "__main__":
    sys.exit(main())
