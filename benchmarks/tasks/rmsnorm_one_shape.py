"""rmsnorm at one decode shape (T = 64, H = 4096, bf16) and no held-out shape: the cheapest full evaluation of a
real kernel (worker, box, compile, correctness, timing), for runs whose point is the number of attempts, as
the long-run memory probe's 200 on one GPU. Everything but the shapes and the dtype is the built-in task's."""

import dataclasses

import torch

from ratchet.task import ShapeSet, load_task

_RMSNORM = load_task("rmsnorm")

TASK = dataclasses.replace(
    _RMSNORM,
    name="rmsnorm_one_shape",
    gpu=ShapeSet(public=[{"T": 64, "H": 4096}]),
    dtypes=(torch.bfloat16,),
)
