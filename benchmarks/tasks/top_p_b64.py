"""top_p_sampling at the top-p goal's shape only (B = 64, V = 129280, fp32): the task on which the split-row and
pivot SPACEs are measured on the GPU. A full top-p evaluation (8 public shapes, each with ~1.7 s of
statistical checks on the CPU, and held-out shapes) takes minutes per config; this one shape lets a whole
landscape fit one device call. Everything but the shapes is the built-in task's (its seeds too)."""

import dataclasses

from ratchet.task import ShapeRange, ShapeSet, load_task

_TOP_P = load_task("top_p_sampling")

TASK = dataclasses.replace(
    _TOP_P,
    name="top_p_b64",
    gpu=ShapeSet(public=[{"B": 64, "V": 129280}],
                 held_out=ShapeRange(dims={"B": (48, 80), "V": [129280]}, count=1)),
)
