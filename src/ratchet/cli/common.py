"""What every command shares: the one-line usage error, the parser class, device and flag parsing, the ledger
flag and the files beside the ledger, the gate's grid flags."""

from __future__ import annotations

import argparse

EXIT_USAGE = 2
LEDGER_HELP = "ledger file (default: $RATCHET_LEDGER or .ratchet/ledger.sqlite)"
MODEL_HELP = ("a built-in workload (llama, deepseek), a transformers model directory or its config.json (random "
              "weights when none are there; nothing is downloaded), or module:function")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def _get_values(self, action, arg_strings):
        # Python 3.11 and 3.12 drop a '--' given as an option's own value (--output=--), leaving an empty
        # list where a string belongs, which the command then failed on with a traceback.
        if action.option_strings and action.nargs in (None, "?") and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: '--' is not a value")
        return super()._get_values(action, arg_strings)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(requested: str | None) -> str:
    import torch

    device = requested or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is present on this machine (use --device cpu)")
    return device


def parse_speedup(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.lower().removesuffix("x"))
    except ValueError:
        raise UsageError(f"--target '{text}' is not a speedup like 3x or 1.5") from None
    if value <= 0:
        raise UsageError("--target must be positive")
    return value


def parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1].lower() in units:
            value = float(text[:-1]) * units[text[-1].lower()]
        else:
            value = float(text)
    except (ValueError, IndexError):
        raise UsageError(f"--time '{text}' is not a duration like 90s, 20m or 2h") from None
    if value <= 0:
        raise UsageError("--time must be positive")
    return value


def parse_gpus(text: str | None, device: str) -> list[int] | None:
    if text is None:
        return None
    import torch

    if device != "cuda":
        raise UsageError("--gpus needs --device cuda")
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise UsageError(f"--gpus '{text}' is not a list of GPU indices like 0,1") from None
    bad = [g for g in gpus if not 0 <= g < torch.cuda.device_count()]
    if not gpus or bad:
        raise UsageError(f"--gpus {text}: this machine has {torch.cuda.device_count()} GPU(s)")
    if len(set(gpus)) != len(gpus):
        # Each GPU's evaluations share one device lock; a GPU listed twice would time two at once.
        raise UsageError(f"--gpus {text}: list each GPU once")
    return gpus


def open_ledger(path: str | None, create: bool = True):
    from ratchet.run.ledger import Ledger, default_ledger_path

    return Ledger(default_ledger_path(path), create=create)



def add_ledger_option(parser) -> None:
    parser.add_argument("--ledger", metavar="PATH", help=LEDGER_HELP)


def recorded_ledger(path: str | None):
    """The ledger file ``--ledger`` names (or the default), which must exist: a command that only reads
    the record has nothing to show without one."""
    from ratchet.run.ledger import default_ledger_path

    ledger = default_ledger_path(path)
    if not ledger.is_file():
        raise UsageError(f"no ledger at {ledger} (no runs recorded there yet)")
    return ledger


def gates_dir(path: str | None):
    """Where the gates' outcomes of the ledger ``--ledger`` names are written (beside it)."""
    from ratchet.e2e.gate import gates_dir_for
    from ratchet.run.ledger import default_ledger_path

    return gates_dir_for(default_ledger_path(path))


def stderr_progress(quiet: bool):
    """Progress lines for stderr (stdout may carry the one JSON object), or none at all when ``quiet``."""
    import sys

    if quiet:
        return lambda line: None
    return lambda line: print(line, file=sys.stderr, flush=True)


def print_table_head(title: str, header: str) -> None:
    """A plain-text table's title line, its column header and a rule as wide as the header."""
    print(title)
    print(header)
    print("-" * len(header))


# -- the workloads' size and the gate's grid (ratchet gate, optimize, stack) -------------------------------
def default_size(device: str) -> str:
    return "full" if device == "cuda" else "tiny"


def add_grid_options(parser) -> None:
    """The settings of the gate's grid: decode contexts and batches, and prefill."""
    parser.add_argument("--contexts", metavar="LIST", help="decode contexts the gate measures, e.g. 1024,8192,32768 "
                        "(default: full 1k, 8k, 32k, and 64k, 128k where memory allows; tiny 64, 256, 1024)")
    parser.add_argument("--batches", metavar="LIST", help="decode batch sizes the gate measures (default: full 1,32; "
                        "tiny 1,4)")
    parser.add_argument("--prefill", metavar="LIST", help="prefill settings BxS the gate measures, e.g. 1x4096,8x512 "
                        "(default: full 1x4096; tiny 1x256; 'none' for no prefill)")


def parse_ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{flag} '{text}' is not a list of whole numbers like 1,32") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag} needs positive whole numbers")
    return values


def parse_prefill(text: str | None) -> tuple[tuple[int, int], ...] | None:
    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    out = []
    for item in text.split(","):
        try:
            b, s = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise UsageError(f"--prefill '{item}' is not BATCHxLENGTH like 1x4096") from None
        if b < 1 or s < 1:
            raise UsageError("--prefill needs a positive batch and length")
        out.append((b, s))
    return tuple(out)


def add_executor_flags(parser) -> None:
    """--executor and --address of ``ratchet run`` and ``ratchet optimize`` (docs/scale.md)."""
    parser.add_argument("--executor", choices=["local", "ray"], help="where evaluations run: local (this "
                        "machine's GPUs or CPU) or ray (one actor per GPU of a Ray cluster; needs Ray: pip "
                        "install 'ratchet[ray]'). Default: local; with --resume, what the run was started with")
    parser.add_argument("--address", metavar="ADDR", help="with --executor ray: the cluster's address, e.g. "
                        "ray://head:10001 or head:6379 (default: $RAY_ADDRESS, a cluster started on this "
                        "machine with 'ray start', else a new local one)")


def executor_choice(args):
    """The executor the flags ask for (an ExecutorChoice), or None when neither flag was given."""
    from ratchet.run.executor import ExecutorChoice, ExecutorError

    if args.executor is None and args.address is None:
        return None
    if args.address is not None and args.executor != "ray":
        raise UsageError("--address goes with --executor ray")
    if args.executor == "ray" and getattr(args, "gpus", None):
        raise UsageError("--gpus is for the local executor; on a Ray cluster every GPU is used")
    try:
        return ExecutorChoice(args.executor, args.address)
    except ExecutorError as exc:
        raise UsageError(str(exc)) from None
