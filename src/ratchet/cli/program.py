"""``ratchet program TASK``: write ``program.md``, the instructions an outside coding agent (Claude Code,
Codex and the like) follows to drive a run: the goal, the loop, this run's exact commands, the rules of
candidate files, what the judge refuses and the rules of honest measurement."""

from __future__ import annotations

from pathlib import Path


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    pg = sub.add_parser("program", help="write program.md: the loop, commands and rules for an outside coding agent",
                        description="Write program.md (or -o FILE) telling an outside coding agent how to drive "
                        "a run: read the brief, write a candidate, 'ratchet eval ... --run RUN', read the verdict, "
                        "add ideas, repeat. Without --run a new run (proposer 'agent') is created, so the "
                        "commands in the file are concrete.")
    pg.add_argument("task", metavar="TASK", help="built-in task name or task file")
    pg.add_argument("--run", metavar="RUN", help="an existing run of TASK (default: create one)")
    pg.add_argument("-o", "--output", default="program.md", metavar="FILE", help="default: ./program.md")
    pg.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    pg.add_argument("--device", choices=["cpu", "cuda"], help="device of a new run (default: cuda if present)")
    pg.add_argument("--device-name", metavar="NAME", help="with --device cuda: the GPU that will judge the new run, "
                    "e.g. H200; no GPU is needed here (default: the local GPU's name)")
    pg.add_argument("--target", metavar="SPEEDUP", help="goal of a new run, e.g. 2x")
    add_ledger_option(pg)
    pg.set_defaults(func=cmd_program)


def cmd_program(args) -> int:
    from ratchet.agents import api as agents_api
    from ratchet.cli.common import UsageError, default_device, open_ledger, parse_speedup
    from ratchet.task import load_task

    out = Path(args.output)
    if out.exists() and not args.force:
        raise UsageError(f"{out} exists; use --force to overwrite it")
    if args.run and (args.device or args.target or args.device_name):
        raise UsageError("--device, --device-name and --target set up a new run; not with --run")
    if args.device_name and args.device != "cuda":
        raise UsageError("--device-name names a GPU: it goes with --device cuda")
    with open_ledger(args.ledger, create=not args.run) as ledger:
        if args.run:
            run = ledger.get_run(args.run)
            task = agents_api.task_for_run(run, args.task)
            created = False
        else:
            task = load_task(args.task)
            # A cuda run needs no GPU here: it is judged later, on the GPU it names.
            run = ledger.get_run(agents_api.create_agent_run(ledger, task, args.device or default_device(),
                                                             parse_speedup(args.target), args.device_name))
            created = True
        text = agents_api.program_text(task, run, agents_api.ledger_flag(args.ledger), ledger)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    verb = "created run" if created else "run"
    print(f"wrote {out} ({verb} {run['id']}: {task.name} on {run['device']}); hand it to your coding agent")
    return 0
