"""A tiny task for the judge's own tests: out = a * x + y, fp32, two small shapes."""

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task


def reference(x, y, a):
    return a * x + y


def make_inputs(shape, dtype, device, generator):
    x = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    y = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    a = float(torch.rand((), generator=generator, device=device)) + 0.5
    return x, y, a


SHAPES = ShapeSet(public=[{"N": 1000}, {"N": 4096}], held_out=ShapeRange({"N": (100, 5000)}, count=1))

TASK = Task(
    name="axpby",
    reference=reference,
    make_inputs=make_inputs,
    gpu=SHAPES,
    cpu=SHAPES,
    dtypes=(torch.float32,),
    cost=lambda s, d: Cost(bytes=3 * 4 * s["N"], flops=2 * s["N"]),
    forbidden=("aten::addcmul",),
)
