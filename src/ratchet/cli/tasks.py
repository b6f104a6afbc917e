"""``ratchet tasks``: the built-in tasks and their seeds."""

from __future__ import annotations

import json


def register(sub, parser_class) -> None:
    ts = sub.add_parser("tasks", help="list the built-in tasks and their seeds",
                        description="List built-in tasks with their shapes, dtypes and seed candidates.")
    ts.add_argument("--json", action="store_true", help="print a JSON list")
    ts.set_defaults(func=cmd_tasks)



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

