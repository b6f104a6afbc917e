"""``ratchet idea add TASK "..."`` and ``ratchet idea list``: the ideas people bring, and what became of
them (the attempts that cite an idea link to it; the brief shows the pending ones to proposers)."""

from __future__ import annotations

import json


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    idea = sub.add_parser("idea", help="add or list ideas for a task (they reach the brief and the proposers)",
                          description="Ideas are short notes on what to try ('split the row across programs "
                          "at B=1'). Proposers see the pending ones in the brief; attempts built on an idea "
                          "link to it, and 'ratchet idea list' shows each idea's outcome.")
    actions = idea.add_subparsers(dest="idea_action", metavar="ACTION", parser_class=parser_class)
    add = actions.add_parser("add", help="record an idea for TASK", description="Record an idea for TASK.")
    add.add_argument("task", metavar="TASK", help="built-in task name or task file")
    add.add_argument("text", metavar="TEXT", help="the idea, in a sentence or two")
    add.add_argument("--author", default="human", help="who brings it (default: human)")
    add_ledger_option(add)
    add.add_argument("--json", action="store_true", help="print the new idea as JSON")
    add.set_defaults(func=cmd_idea_add)
    ls = actions.add_parser("list", help="list ideas and their outcomes",
                            description="List ideas (of one task with --task): status, attempts that tried "
                            "them, how many passed or were kept, and the best speedup among those.")
    ls.add_argument("--task", metavar="TASK", help="only this task's ideas")
    add_ledger_option(ls)
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    ls.set_defaults(func=cmd_idea_list)
    drop = actions.add_parser("drop", help="mark an idea as dropped (proposers stop seeing it)",
                              description="Mark idea ID as dropped.")
    drop.add_argument("id", metavar="ID", type=int)
    add_ledger_option(drop)
    drop.set_defaults(func=cmd_idea_drop)
    idea.set_defaults(func=lambda args: _usage(idea))


def _usage(parser) -> int:
    parser.print_help()
    return 2


def task_name(spec: str) -> str:
    """Ideas are filed under the task's name, so a file path and the built-in name meet."""
    from ratchet.task import load_task

    return load_task(spec).name


def cmd_idea_add(args) -> int:
    from ratchet.cli.common import open_ledger

    task = task_name(args.task)
    with open_ledger(args.ledger) as ledger:
        idea = ledger.get_idea(ledger.add_idea(task, args.text, author=args.author))
    if args.json:
        print(json.dumps(idea))
    else:
        print(f"idea {idea['id']} for {task}: {idea['text']}")
    return 0


def cmd_idea_list(args) -> int:
    from ratchet.cli.common import open_ledger
    from ratchet.run.ledger import default_ledger_path

    task = task_name(args.task) if args.task else None
    ideas = []
    if default_ledger_path(args.ledger).exists():
        with open_ledger(args.ledger, create=False) as ledger:
            ideas = ledger.ideas(task)
    if args.json:
        print(json.dumps(ideas))
        return 0
    if not ideas:
        print("no ideas yet (add one with 'ratchet idea add TASK \"...\"')")
    for i in ideas:
        best = f"best {i['best_speedup']:.3f}x" if i["best_speedup"] else "no pass yet" if i["attempts"] else ""
        print(f"{i['id']:>4}  {i['task']:<16} {i['status']:<8} {i['attempts']:>3} attempts, {i['passed']} passed, "
              f"{i['kept']} kept {best:<12}  {i['text']}  ({i['author']})")
    return 0


def cmd_idea_drop(args) -> int:
    from ratchet.cli.common import open_ledger

    with open_ledger(args.ledger, create=False) as ledger:
        ledger.set_idea_status(args.id, "dropped")
    print(f"idea {args.id} dropped")
    return 0
