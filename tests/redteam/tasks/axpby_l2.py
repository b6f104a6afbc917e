"""A red-team task: out = a * x + y with GPU shapes whose inputs fit in an H100/H200 L2 (50-60 MB):
x and y together are 16 and 24 MB. A persisting-L2 access policy would keep them resident across
calls if the judge did not reset persisting lines and flush the L2 before every timed call (#18)."""

import torch

from ratchet.task import Cost, ShapeSet, Task


def reference(x, y, a):
    return a * x + y


def make_inputs(shape, dtype, device, generator):
    x = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    y = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    a = float(torch.rand((), generator=generator, device=device)) + 0.5
    return x, y, a


_SHAPES = ShapeSet(public=[{"N": 2 << 20}, {"N": 3 << 20}])

TASK = Task(
    name="axpby_l2",
    reference=reference,
    make_inputs=make_inputs,
    gpu=_SHAPES,
    cpu=ShapeSet(public=[{"N": 1000}, {"N": 4096}]),
    dtypes=(torch.float32,),
    cost=lambda s, d: Cost(bytes=3 * 4 * s["N"], flops=2 * s["N"]),
)
