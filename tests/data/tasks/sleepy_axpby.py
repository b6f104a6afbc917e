"""axpby.py (out = a * x + y, fp32) whose reference sleeps 10 ms per call, for tests that compare speeds.

On a small shared CPU the times of a microsecond kernel, and of its reference, move by tens of percent
between evaluations; with the reference's time and the candidates' held by sleeps, speed ratios in the
tests stay what the candidates were written to have. Two public shapes, a small and a large one.
"""

import time
from dataclasses import replace
from pathlib import Path

from ratchet.task import ShapeRange, ShapeSet, load_task

AXPBY = load_task(str(Path(__file__).with_name("axpby.py")))


def reference(x, y, a):
    time.sleep(0.01)
    return AXPBY.reference(x, y, a)


SHAPES = ShapeSet(public=[{"N": 1000}, {"N": 8192}], held_out=ShapeRange({"N": (100, 9000)}, count=1))

# axpby's inputs, dtype and cost; no forbidden op (the sleeping candidates may use any).
TASK = replace(AXPBY, name="sleepy_axpby", reference=reference, gpu=SHAPES, cpu=SHAPES, forbidden=(),
               source_path=None, seeds_dir=None)
