"""A red-team task: out = a * x + y with GPU shapes big enough (up to 768 MB moved) that hidden work
(a side stream, a patched event) is tens to hundreds of microseconds, far above the outside clock's
slack. Everything else is tests/data/tasks/axpby.py."""

import dataclasses
from pathlib import Path

from ratchet.task import ShapeRange, ShapeSet, load_task

TASK = dataclasses.replace(
    load_task(str(Path(__file__).parents[2] / "data" / "tasks" / "axpby.py")),
    name="axpby_big", forbidden=(),
    gpu=ShapeSet(public=[{"N": 1 << 24}, {"N": 1 << 26}], held_out=ShapeRange({"N": (1 << 20, 1 << 22)}, count=1)),
)
