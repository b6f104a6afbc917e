"""``ratchet eval TASK CANDIDATE``: judge one candidate (and optionally record it in a run)."""

from __future__ import annotations

import json
import sys

from ratchet.cli.common import UsageError, open_ledger, resolve_device


def register(sub, parser_class) -> None:
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
    ev.add_argument("--run", metavar="RUN", help="record the attempt in RUN (proposer 'agent') and apply the "
                    "keep rule; the run's task file and device judge it (see 'ratchet program')")
    ev.add_argument("--ncu", action="store_true", help="if the candidate passes on a GPU, profile one call of it "
                    "with Nsight Compute (DRAM and SM throughput, occupancy, registers, spills) to explain its "
                    "bottleneck class; never changes the verdict ($RATCHET_NCU: path to ncu, or off)")
    ev.add_argument("--idea", type=int, metavar="ID", help="with --run: the idea this attempt tries")
    ev.add_argument("--ledger", metavar="PATH", help="with --run: ledger file (default: $RATCHET_LEDGER or "
                    ".ratchet/ledger.sqlite)")
    ev.set_defaults(func=cmd_eval)



def cmd_eval(args) -> int:
    from contextlib import ExitStack

    from ratchet.agents import api as agents_api
    from ratchet.candidate import CandidateError, load_candidate, parse_config
    from ratchet.judge import JudgeOptions, evaluate
    from ratchet.judge.verdict import Reason, Verdict
    from ratchet.run.ledger import LedgerError
    from ratchet.report.console import print_verdict
    from ratchet.task import TaskError, load_task

    with ExitStack() as stack:
        ledger = run = None
        try:
            if args.run:
                if args.allow or args.no_timing:
                    raise UsageError("--allow and --no-timing cannot be used with --run: a run's judge is fixed")
                ledger = stack.enter_context(open_ledger(args.ledger, create=False))
                run = ledger.get_run(args.run)
            elif args.idea is not None or args.ledger:
                raise UsageError("--idea and --ledger go with --run RUN")
            device = resolve_device(args.device or (run and run["device"]))
            task = agents_api.task_for_run(run, args.task) if run else load_task(args.task)
            candidate = load_candidate(args.candidate)
            config = candidate.resolve_config(parse_config(args.config))
            if run:
                agents_api.check_attempt(ledger, run, device, candidate, config, args.idea)
        except (UsageError, TaskError, CandidateError, LedgerError) as exc:
            if args.json:  # programs reading stdout still get their one object
                bad = Verdict("error", [Reason("bad_input", str(exc))], task=args.task, candidate=args.candidate)
                print(json.dumps(bad.to_json()))
            raise
        options = JudgeOptions(device=device, allow=tuple(args.allow), time_it=not args.no_timing)
        verdict = evaluate(task, candidate, config, options)
        counters = None
        if args.ncu:  # after the verdict, with nothing else on the GPU: this process judged alone
            from ratchet.diagnose.ncu import profile_judged

            counters = profile_judged(task, candidate, config, verdict.verdict, device).to_json()
        recorded = {}
        if run:
            recorded = agents_api.record(ledger, run["id"], candidate, config, verdict.to_json(with_times=True),
                                         args.idea)
            if counters and counters["available"]:
                from ratchet.run.record import attach_counters

                seq = recorded["attempt_seq"]
                attempt = next(a for a in ledger.attempts(run["id"]) if a["seq"] == seq)
                attach_counters(ledger, attempt["id"], counters)
    if args.json:
        print(json.dumps({**verdict.to_json(), **recorded, **({"counters": counters} if counters else {})}))
    else:
        print_verdict(verdict, counters=counters)
        if recorded:
            best = "none"
            if recorded["best_seq"]:
                best = f"{recorded['best_speedup']:.3f}x (attempt {recorded['best_seq']})"
            print(f"recorded as attempt {recorded['attempt_seq']} of run {recorded['run']}: "
                  f"{'KEPT' if recorded['kept'] else 'not kept'} ({recorded['keep_reason']}); best {best}")
    if verdict.verdict == "error":
        first = verdict.reasons[0]
        print(f"ratchet: error: {first.code}: {first.detail}", file=sys.stderr)
    return verdict.exit_code

