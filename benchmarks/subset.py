"""Smaller versions of a task for benchmarks that must fit a device session: the first N public shapes
of the device's shape set and/or the first dtype only. Held-out shapes are kept (the judge draws them)."""

from __future__ import annotations

import dataclasses

from ratchet.task import Task


def subset_task(task: Task, device: str, shapes: int | None = None, first_dtype: bool = False) -> Task:
    changes = {}
    if shapes:
        field = "cpu" if device == "cpu" else "gpu"
        shape_set = task.shape_set(device)
        changes[field] = dataclasses.replace(shape_set, public=list(shape_set.public[:shapes]))
    if first_dtype:
        changes["dtypes"] = task.dtypes[:1]
    return dataclasses.replace(task, **changes) if changes else task


def describe_subset(shapes: int | None, first_dtype: bool) -> str:
    parts = ([f"first {shapes} public shapes"] if shapes else []) + (["first dtype only"] if first_dtype else [])
    return ", ".join(parts)
