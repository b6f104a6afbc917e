"""A red-team task: out = a * x + y with GPU shapes big enough (up to 768 MB moved) that hidden work
(a side stream, a patched event) is tens to hundreds of microseconds, far above the outside clock's
slack. The CPU shapes are those of tests/data/tasks/axpby.py."""

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task


def reference(x, y, a):
    return a * x + y


def make_inputs(shape, dtype, device, generator):
    x = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    y = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    a = float(torch.rand((), generator=generator, device=device)) + 0.5
    return x, y, a


TASK = Task(
    name="axpby_big",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(public=[{"N": 1 << 24}, {"N": 1 << 26}], held_out=ShapeRange({"N": (1 << 20, 1 << 22)}, count=1)),
    cpu=ShapeSet(public=[{"N": 1000}, {"N": 4096}], held_out=ShapeRange({"N": (100, 5000)}, count=1)),
    dtypes=(torch.float32,),
    cost=lambda s, d: Cost(bytes=3 * 4 * s["N"], flops=2 * s["N"]),
)
