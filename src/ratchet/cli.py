"""The ``ratchet`` command: parses, calls the library, prints. No logic a library user would need."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ratchet", description=(
        "Ratchet: autoresearch for the GPU kernels of LLM inference. A trusted judge checks every "
        "candidate kernel on fresh inputs and held-out shapes and times it against the task's reference."))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ev = sub.add_parser("eval", help="judge one candidate kernel against a task", description=(
        "Judge CANDIDATE on TASK: correctness on public and held-out shapes in every dtype, guards against "
        "reward hacks, then timing interleaved with the reference. Exit 0 pass, 1 fail, 2 error or bad usage."))
    ev.add_argument("task", metavar="TASK", help="built-in task name (see 'ratchet tasks'), task file, or KernelBench problem file")
    ev.add_argument("candidate", metavar="CANDIDATE", help="candidate file defining kernel(...) (or a KernelBench ModelNew file)")
    ev.add_argument("--config", metavar="JSON", help="one point of the candidate's SPACE, e.g. '{\"BLOCK\": 1024}'")
    ev.add_argument("--device", choices=["cpu", "cuda"], help="where to judge (default: cuda if present, else cpu)")
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ev.add_argument("--allow", action="append", default=[], metavar="OP",
                    help="allow a forbidden op by its profiler name (repeatable)")
    ev.add_argument("--no-timing", action="store_true", help="check correctness only")
    ev.set_defaults(func=cmd_eval)

    ts = sub.add_parser("tasks", help="list the built-in tasks and their seeds",
                        description="List built-in tasks with their shapes, dtypes and seed candidates.")
    ts.add_argument("--json", action="store_true", help="print a JSON list")
    ts.set_defaults(func=cmd_tasks)
    return parser


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_eval(args) -> int:
    from ratchet.candidate import CandidateError, load_candidate, parse_config
    from ratchet.judge import JudgeOptions, evaluate
    from ratchet.judge.verdict import Reason, Verdict
    from ratchet.report.console import print_verdict
    from ratchet.task import TaskError, load_task

    try:
        device = resolve_device(args.device)
        task = load_task(args.task)
        candidate = load_candidate(args.candidate)
        config = candidate.resolve_config(parse_config(args.config))
    except (UsageError, TaskError, CandidateError) as exc:
        if args.json:  # programs reading stdout still get their one object
            bad = Verdict("error", [Reason("bad_input", str(exc))], task=args.task, candidate=args.candidate)
            print(json.dumps(bad.to_json()))
        raise
    options = JudgeOptions(device=device, allow=tuple(args.allow), time_it=not args.no_timing)
    verdict = evaluate(task, candidate, config, options)
    if args.json:
        print(json.dumps(verdict.to_json()))
    else:
        print_verdict(verdict)
    if verdict.verdict == "error":
        first = verdict.reasons[0]
        print(f"ratchet: error: {first.code}: {first.detail}", file=sys.stderr)
    return verdict.exit_code


def resolve_device(requested: str | None) -> str:
    import torch

    device = requested or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is present on this machine (use --device cpu)")
    return device


def cmd_tasks(args) -> int:
    from ratchet.task import builtin_task_names, load_task

    rows = []
    for name in builtin_task_names():
        task = load_task(name)
        rows.append({"name": name, "seeds": [str(p) for p in task.seeds()],
                     "dtypes": [str(d).removeprefix("torch.") for d in task.dtypes],
                     "gpu_shapes": len(task.gpu.public), "cpu_shapes": len(task.cpu.public),
                     "description": task.description})
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['name']:<18} {', '.join(row['dtypes']):<24} {row['gpu_shapes']} GPU / {row['cpu_shapes']} CPU "
                  f"shapes, {len(row['seeds'])} seeds")
    return 0


def main(argv: list[str] | None = None) -> int:
    from ratchet.candidate import CandidateError
    from ratchet.task import TaskError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except (UsageError, TaskError, CandidateError) as exc:
        print(f"ratchet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ratchet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
