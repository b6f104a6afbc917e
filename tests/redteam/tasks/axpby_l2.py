"""A red-team task: out = a * x + y with GPU shapes whose inputs fit in an H100/H200 L2 (50-60 MB):
x and y together are 16 and 24 MB. A persisting-L2 access policy would keep them resident across
calls if the judge did not reset persisting lines and flush the L2 before every timed call (#18).
Everything else is tests/data/tasks/axpby.py."""

import dataclasses
from pathlib import Path

from ratchet.task import ShapeSet, load_task

TASK = dataclasses.replace(
    load_task(str(Path(__file__).parents[2] / "data" / "tasks" / "axpby.py")),
    name="axpby_l2", forbidden=(),
    gpu=ShapeSet(public=[{"N": 2 << 20}, {"N": 3 << 20}]),
    cpu=ShapeSet(public=[{"N": 1000}, {"N": 4096}]),
)
