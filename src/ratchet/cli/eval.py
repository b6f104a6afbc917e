"""``ratchet eval TASK CANDIDATE...``: judge candidate files (and optionally record them in a run)."""

from __future__ import annotations

import json
import sys

from ratchet.cli.common import UsageError, open_ledger, resolve_device


def register(sub, parser_class) -> None:
    ev = sub.add_parser("eval", help="judge candidate kernels against a task", description=(
        "Judge each CANDIDATE on TASK: correctness on public and held-out shapes in every dtype, guards against "
        "reward hacks, then timing interleaved with the reference. Several files are judged in one process, in "
        "order, pipelined as 'ratchet run' judges (on a GPU the next files compile while one is timed); with "
        "--json one JSON object per file, one per line, in order. Exit status: the worst over the files: 2 if "
        "any is an error (or bad usage), else 1 if any failed, else 0."))
    ev.add_argument("task", metavar="TASK", help="built-in task name (see 'ratchet tasks'), task file, or KernelBench problem file")
    ev.add_argument("candidates", metavar="CANDIDATE", nargs="+",
                    help="candidate file defining kernel(...) (or a KernelBench ModelNew file); several are judged in order")
    ev.add_argument("--config", metavar="JSON", help="one point of the candidates' SPACE, e.g. '{\"BLOCK\": 1024}'")
    ev.add_argument("--device", choices=["cpu", "cuda"], help="where to judge (default: cuda if present, else cpu)")
    ev.add_argument("--json", action="store_true", help="print one JSON object per candidate on stdout, one per line")
    ev.add_argument("--allow", action="append", default=[], metavar="OP",
                    help="allow a forbidden op by its profiler name (repeatable)")
    ev.add_argument("--no-timing", action="store_true", help="check correctness only")
    ev.add_argument("--shape", action="append", default=[], metavar="JSON",
                    help="with --no-timing: check this shape (at every dtype) instead of the task's public and "
                         "held-out ones, e.g. a held-out shape a verdict failed at: '{\"B\": 9, \"S\": 2}'; "
                         "repeatable. Dims the task's shape set has and the shape lacks take their value from its "
                         "first public shape (the CPU set's narrowed width W, say)")
    ev.add_argument("--run", metavar="RUN", help="record each attempt in RUN, in order (proposer 'agent'), and apply "
                    "the keep rule; the run's task file and device judge it, and a candidate clearly slower than the "
                    "run's best at its heaviest shapes is no longer timed (raced; see 'ratchet program')")
    ev.add_argument("--ncu", action="store_true", help="if a candidate passes on a GPU, profile one call of it "
                    "with Nsight Compute (DRAM and SM throughput, occupancy, registers, spills) to explain its "
                    "bottleneck class; never changes the verdict ($RATCHET_NCU: path to ncu, or off)")
    ev.add_argument("--idea", type=int, metavar="ID", help="with --run: the idea these attempts try")
    ev.add_argument("--ledger", metavar="PATH", help="with --run: ledger file (default: $RATCHET_LEDGER or "
                    ".ratchet/ledger.sqlite)")
    ev.set_defaults(func=cmd_eval)


def cmd_eval(args) -> int:
    from contextlib import ExitStack

    from ratchet.agents import api as agents_api
    from ratchet.candidate import CandidateError, parse_config
    from ratchet.judge.verdict import Reason, Verdict
    from ratchet.run.ledger import LedgerError
    from ratchet.task import TaskError, load_task

    with ExitStack() as stack:
        ledger = run = None
        try:
            if args.run:
                given = [flag for flag, on in (("--allow", args.allow), ("--no-timing", args.no_timing)) if on]
                if given:
                    raise UsageError(f"{' and '.join(given)} cannot be used with --run: a run's judge is fixed "
                                     "(check correctness alone without --run and --ledger)")
                ledger = stack.enter_context(open_ledger(args.ledger, create=False))
                run = ledger.get_run(args.run)
            elif args.idea is not None or args.ledger:
                raise UsageError("--idea and --ledger go with --run RUN")
            device = resolve_device(args.device or (run and run["device"]))
            task = agents_api.task_for_run(run, args.task) if run else load_task(args.task)
            config = parse_config(args.config)
            shapes = chosen_shapes(args.shape, task, device, args.no_timing)
        except (UsageError, TaskError, CandidateError, LedgerError) as exc:
            if args.json:  # programs reading stdout still get their object per file
                for path in args.candidates:
                    bad = Verdict("error", [Reason("bad_input", str(exc))], task=args.task, candidate=path)
                    print(json.dumps(bad.to_json()), flush=True)
            raise
        options = agents_api.batch_options(device, allow=tuple(args.allow), time_it=not args.no_timing,
                                           shapes=shapes)
        several = len(args.candidates) > 1
        results = agents_api.judge_files(task, args.candidates, options, config, ledger, run, args.idea,
                                         ncu=args.ncu, on_result=lambda judged: _show(judged, args.json, several))
    return agents_api.worst_exit_code(results)


def chosen_shapes(texts: list[str], task, device: str, no_timing: bool) -> tuple[dict, ...]:
    """``--shape`` values as whole shapes of the task's shape set for ``device``: each a JSON object of
    integer dims the set has; the dims it leaves out are the set's first public shape's."""
    if not texts:
        return ()
    if not no_timing:
        raise UsageError("--shape goes with --no-timing: a time is judged over the task's own shapes")
    base = dict(task.shape_set(device).public[0])
    shapes = []
    for text in texts:
        try:
            shape = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--shape {text!r}: not JSON ({exc.msg})") from None
        if not isinstance(shape, dict) or not all(isinstance(v, int) and v > 0 for v in shape.values()):
            raise UsageError(f"--shape {text!r}: give an object of positive integer dims, e.g. '{json.dumps(base)}'")
        unknown = sorted(set(shape) - set(base))
        if unknown:
            raise UsageError(f"--shape {text!r}: {task.name}'s {device} shapes have no dim {', '.join(unknown)} "
                             f"(its dims: {', '.join(base)})")
        shapes.append({**base, **shape})
    return tuple(shapes)


def _show(judged, as_json: bool, several: bool) -> None:
    """One file's outcome as it is committed: its JSON line, or the verdict's table; errors on stderr."""
    from ratchet.report.console import print_verdict

    verdict, recorded = judged.verdict, judged.recorded
    if as_json:
        print(json.dumps(judged.to_json()), flush=True)
    elif judged.refused is None:
        print_verdict(verdict, counters=judged.counters)
        if recorded:
            best = "none"
            if recorded["best_seq"]:
                best = f"{recorded['best_speedup']:.3f}x (attempt {recorded['best_seq']})"
            print(f"recorded as attempt {recorded['attempt_seq']} of run {recorded['run']}: "
                  f"{'KEPT' if recorded['kept'] else 'not kept'} ({recorded['keep_reason']}); best {best}", flush=True)
    where = f"{judged.path}: " if several else ""
    if judged.refused is not None:
        print(f"ratchet: error: {where}{judged.refused}", file=sys.stderr, flush=True)
    elif verdict.verdict == "error":
        first = verdict.reasons[0]
        print(f"ratchet: error: {where}{first.code}: {first.detail}", file=sys.stderr, flush=True)
