"""Smaller versions of a task for benchmarks that must fit a device session: the public shapes of the
device's shape set that match given sizes (``where``), the first N of them and/or the first dtype only.
Held-out shapes are kept (the judge draws them)."""

from __future__ import annotations

import dataclasses

from ratchet.task import Task


def subset_task(task: Task, device: str, shapes: int | None = None, first_dtype: bool = False,
                where: dict[str, int] | None = None) -> Task:
    changes = {}
    if shapes or where:
        field = "cpu" if device == "cpu" else "gpu"
        shape_set = task.shape_set(device)
        public = [s for s in shape_set.public if all(s.get(k) == v for k, v in (where or {}).items())]
        if not public:
            raise ValueError(f"{task.name}: no public {field} shape has {where}")
        changes[field] = dataclasses.replace(shape_set, public=public[:shapes] if shapes else public)
    if first_dtype:
        changes["dtypes"] = task.dtypes[:1]
    return dataclasses.replace(task, **changes) if changes else task


def describe_subset(shapes: int | None, first_dtype: bool, where: dict[str, int] | None = None) -> str:
    parts = ([f"public shapes with {', '.join(f'{k}={v}' for k, v in where.items())}"] if where else [])
    parts += ([f"first {shapes} public shapes"] if shapes else []) + (["first dtype only"] if first_dtype else [])
    return ", ".join(parts)


def parse_where(items: list[str] | None) -> dict[str, int]:
    """``["Hkv=1", "B=32"]`` -> ``{"Hkv": 1, "B": 32}`` (argparse type errors say which item is wrong)."""
    where = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.lstrip("-").isdigit():
            raise ValueError(f"--where wants SIZE=INTEGER, got {item!r}")
        where[key] = int(value)
    return where
