"""A built-in task with the shapes the user's model runs added, for a campaign's run of it.

A built-in task judges the shapes of the models it was written for (rmsnorm: hidden sizes 4096 to 8192).
A user's model may call the same op elsewhere: Qwen3-30B-A3B normalises at hidden 2048 and its q/k norms
at head size 128. The gate times a kernel on every call, but an exported package runs a kernel only
inside the shapes the judge passed (per dimension, the smallest to the largest judged) and the model's
own op outside them; on an H100 (2026-12-07) a Qwen3-MoE campaign's rmsnorm kernel gated at 0.895 of
the batch-1 step and then ran on none of the model's 17 norm calls a step.

So when the profile saw the op at shapes outside its task's public box, the campaign runs a task file
written here: the built-in task unchanged (reference, checks, seeds, held-out ranges) with those shapes
added to the public list of the device's shape set.
"""

from __future__ import annotations

import json
from pathlib import Path

from ratchet.e2e.export import shape_ranges
from ratchet.task import Task, load_task

MAX_ADDED = 6  # the model's costliest shapes the task lacks; each one more shape in every evaluation


def uncovered(task: Task, device: str, profiled: dict) -> list[dict]:
    """The model's shapes of ``task`` (a Ranked entry's ``shapes``: phase -> [{"shape", "dtype", "time_us"}])
    that lie outside the public box of the task's shape set on ``device``, at a dtype the task judges,
    costliest first, at most MAX_ADDED."""
    # The public shapes' ranges, as an exported package computes the ranges it runs the kernel in
    box = shape_ranges({"shapes": [{"shape": dict(p)} for p in task.shape_set(device).public]})["dims"]
    judged_dtypes = {str(d).removeprefix("torch.") for d in task.dtypes}
    seen, found = set(), []
    rows = sorted((row for rows in profiled.values() for row in rows), key=lambda r: -(r.get("time_us") or 0))
    for row in rows:
        shape = row.get("shape")
        if not isinstance(shape, dict) or set(shape) != set(box) or row.get("dtype") not in judged_dtypes:
            continue
        if not all(isinstance(v, int) for v in shape.values()):
            continue
        key = tuple(sorted(shape.items()))
        if key in seen or all(box[k][0] <= v <= box[k][1] for k, v in shape.items()):
            continue
        seen.add(key)
        found.append(dict(shape))
    return found[:MAX_ADDED]


def task_for_model(task_name: str, device: str, profiled: dict, folder: Path, model: str) -> str:
    """The task a campaign runs for built-in ``task_name``: its name when the task already covers the
    model's shapes, else the path of a task file (written in ``folder``) that adds them."""
    task = load_task(task_name)
    added = uncovered(task, device, profiled)
    if not added:
        return task_name
    field = "cpu" if device == "cpu" else "gpu"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{task_name}_with_model_shapes.py"
    path.write_text(f'''"""{task_name}, the built-in task, with the shapes {model} runs that its {field} shape set does not reach.

Written by `ratchet optimize` (ratchet.e2e.model_shapes): an exported package runs a kernel only inside the
shapes the judge passed, so the model's own shapes are judged too. Everything else is the built-in task's.
"""

import dataclasses

from ratchet.task import ShapeSet, load_task

_BUILTIN = load_task({task_name!r})
MODEL_SHAPES = {json.dumps(added)}
_SET = _BUILTIN.{field}
TASK = dataclasses.replace(_BUILTIN, {field}=ShapeSet(public=list(_SET.public) + MODEL_SHAPES, held_out=_SET.held_out))
''')
    return str(path)
