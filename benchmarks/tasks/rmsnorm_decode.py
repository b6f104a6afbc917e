"""rmsnorm at decode sizes only (T = 1 to 256 at hidden sizes 4096 and 8192), bf16: the microsecond kernel
on which the search and loop benchmarks are run on the GPU. A full rmsnorm evaluation (14 shapes x 3
dtypes) takes minutes on the H200; this one ~half a minute, so a benchmark of a dozen evaluations fits in
one device session. Everything but the shapes and the dtype is the built-in task's (its seeds too)."""

import dataclasses

import torch

from ratchet.task import ShapeRange, ShapeSet, load_task

_RMSNORM = load_task("rmsnorm")

TASK = dataclasses.replace(
    _RMSNORM,
    name="rmsnorm_decode",
    gpu=ShapeSet(public=[{"T": t, "H": h} for h in (4096, 8192) for t in (1, 256)],
                 held_out=ShapeRange(dims={"T": (2, 255), "H": [4096, 7168, 8192]}, count=1)),
    dtypes=(torch.bfloat16,),
)
