"""``ratchet context TASK [--run RUN]``: print the brief an agent works from (``ratchet.agents.brief``)."""

from __future__ import annotations

from pathlib import Path

from ratchet.agents import DEFAULT_MAX_CHARS


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    p = sub.add_parser(
        "context", help="print the brief (markdown) an agent works from: goal, hardware, task, best, history, rules",
        description=(
            "Print the markdown brief for TASK: the goal (speedups to beat, per-shape roofline floors), the "
            "hardware sheet and measured ceilings, the task (reference source, shapes and weights, cost model), "
            "the best candidate's source with its verdict, per-shape figures and bottleneck class, a compact "
            "history (what was tried, what failed and why, dead ends), pending ideas, and the rules (the candidate "
            "format, forbidden ops, the judge's refusal codes). History comes from --run RUN, else from the task's "
            "most recent run in the ledger; with none, the task's seeds are shown as starting points. The brief is "
            "at most --max-chars characters: lower-priority sections are shortened first. It reads only."))
    p.add_argument("task", metavar="TASK", help="built-in task name (see 'ratchet tasks') or task file")
    p.add_argument("--run", metavar="RUN", help="take the history, best and ideas from this run (default: the "
                   "task's most recent run on the device)")
    add_ledger_option(p)
    p.add_argument("--device", choices=["cpu", "cuda"], help="the device the brief is for (default: the run's; "
                   "else cuda if present, else cpu); no GPU is needed to write a brief for cuda")
    p.add_argument("--device-name", metavar="NAME", help="with --device cuda: the GPU the brief is for, e.g. H200 "
                   "(its datasheet, cached ceilings and measured reference times; default: the local GPU)")
    p.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS, metavar="N",
                   help=f"bound on the brief's length in characters (default: {DEFAULT_MAX_CHARS})")
    p.add_argument("-o", "--output", metavar="FILE", help="write the brief to FILE instead of printing it")
    p.set_defaults(func=cmd_context)


def cmd_context(args) -> int:
    from ratchet.agents.brief import BriefError, build_brief
    from ratchet.cli.common import UsageError, open_ledger
    from ratchet.run.ledger import default_ledger_path
    from ratchet.task import load_task

    if args.max_chars <= 0:
        raise UsageError(f"--max-chars must be positive, not {args.max_chars}")
    task = load_task(args.task)
    device_name = None
    if args.device_name:
        from ratchet.agents.api import resolve_device_name
        from ratchet.run.ledger import LedgerError

        if args.device != "cuda":
            raise UsageError("--device-name names a GPU: it goes with --device cuda")
        try:
            device_name = resolve_device_name("cuda", args.device_name)
        except LedgerError as exc:
            raise UsageError(str(exc)) from None
    try:
        if default_ledger_path(args.ledger).exists() or args.run:
            with open_ledger(args.ledger, create=False) as ledger:  # never creates a ledger just to read it
                text = build_brief(task, ledger, args.run, args.device, args.max_chars, device_name)
        else:
            text = build_brief(task, None, None, args.device, args.max_chars, device_name)
    except BriefError as exc:
        raise UsageError(str(exc)) from None
    if args.output:
        path = Path(args.output)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"wrote {path} ({len(text)} characters, brief of {task.name})")
    else:
        print(text, end="")
    return 0
