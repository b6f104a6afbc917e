"""axpby (out = a * x + y, fp32) whose reference sleeps 10 ms per call, for tests that compare speeds.

On a small shared CPU the times of a microsecond kernel, and of its reference, move by tens of percent
between evaluations; with the reference's time and the candidates' held by sleeps, speed ratios in the
tests stay what the candidates were written to have. Two public shapes, a small and a large one.
"""

import time

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task


def reference(x, y, a):
    time.sleep(0.01)
    return a * x + y


def make_inputs(shape, dtype, device, generator):
    x = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    y = torch.randn(shape["N"], dtype=dtype, device=device, generator=generator)
    a = float(torch.rand((), generator=generator, device=device)) + 0.5
    return x, y, a


SHAPES = ShapeSet(public=[{"N": 1000}, {"N": 8192}], held_out=ShapeRange({"N": (100, 9000)}, count=1))

TASK = Task(
    name="sleepy_axpby",
    reference=reference,
    make_inputs=make_inputs,
    gpu=SHAPES,
    cpu=SHAPES,
    dtypes=(torch.float32,),
    cost=lambda s, d: Cost(bytes=3 * 4 * s["N"], flops=2 * s["N"]),
)
