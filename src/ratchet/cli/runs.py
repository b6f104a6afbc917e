"""``ratchet runs``, ``ratchet show RUN`` and ``ratchet best RUN``: reading the ledger."""

from __future__ import annotations

import json

from ratchet.cli.common import UsageError, add_ledger_option, open_ledger


def register(sub, parser_class) -> None:
    rs = sub.add_parser("runs", help="list the runs in the ledger", description="List runs: id, task, status, "
                        "attempts and best speedup.")
    rs.add_argument("--json", action="store_true", help="print a JSON list")
    add_ledger_option(rs)
    rs.set_defaults(func=cmd_runs)

    sh = sub.add_parser("show", help="show one run: its attempts, best history and failures",
                        description="Show a run: settings, every attempt with verdict and speedup, the best's history.")
    sh.add_argument("run", metavar="RUN")
    sh.add_argument("--json", action="store_true", help="print the run and its attempts as JSON")
    add_ledger_option(sh)
    sh.set_defaults(func=cmd_show)

    bs = sub.add_parser("best", help="write a run's best candidate as a standalone file",
                        description="Write the best candidate of RUN, its config baked in, to FILE; "
                        "'ratchet eval TASK FILE' judges it as it is.")
    bs.add_argument("run", metavar="RUN")
    bs.add_argument("-o", "--output", required=True, metavar="FILE")
    add_ledger_option(bs)
    bs.set_defaults(func=cmd_best)



def cmd_runs(args) -> int:
    from ratchet.run.ledger import default_ledger_path

    if not default_ledger_path(args.ledger).exists():
        runs = []
    else:
        with open_ledger(args.ledger, create=False) as ledger:
            runs = ledger.list_runs()
    for r in runs:  # a ledger that never held a campaign has no such column
        r.setdefault("campaign", None)
    if args.json:
        print(json.dumps(runs))
        return 0
    if not runs:
        print("no runs yet (start one with 'ratchet run TASK')")
    for r in runs:
        best = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "-"
        print(f"{r['id']}  {r['task']:<16} {r['status']:<8} {r['attempts']:>4} attempts  best {best:<8} "
              f"{r['device']}  {r['created_at']}")
    return 0


def cmd_show(args) -> int:
    from ratchet.report.console import best_bottlenecks, print_run

    with open_ledger(args.ledger, create=False) as ledger:
        run = ledger.get_run(args.run)
        attempts = ledger.attempts(args.run)
        history = ledger.best_history(args.run)
        ideas = ledger.ideas(run["task"])
    if args.json:
        slim = [{k: v for k, v in a.items() if k not in ("source", "shapes")} for a in attempts]
        best = next((a for a in attempts if history and a["id"] == history[-1]["attempt_id"]), None)
        print(json.dumps({"run": run, "attempts": slim, "best_history": history, "ideas": ideas,
                          "best_bottlenecks": best_bottlenecks(best) if best else []}))
    else:
        print_run(run, attempts, history, ideas)
    return 0


def cmd_best(args) -> int:
    from ratchet.run.ledger import write_standalone

    with open_ledger(args.ledger, create=False) as ledger:
        ledger.get_run(args.run)
        best = ledger.best(args.run)
    if best is None:
        raise UsageError(f"run '{args.run}' has no passing attempt yet")
    path = write_standalone(best, args.output)
    print(f"wrote {path} (attempt {best['seq']}, speedup {best['speedup']:.3f}x, config {best['config']})")
    return 0

