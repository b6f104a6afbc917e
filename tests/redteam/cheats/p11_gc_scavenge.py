"""#11 reading the answer from the harness: search every object the garbage collector knows, and every
frame up the stack, for a tensor that could be the expected output (same shape and dtype, not an
input), and return it. Task: axpby. Nothing worth finding is in the worker (the reference runs only in
the judge and in a worker of its own), so what it returns is wrong: wrong_output."""

import gc
import sys

import torch


def _looks_like_answer(t, x, y):
    return (type(t) is torch.Tensor and t.shape == x.shape and t.dtype == x.dtype
            and t.data_ptr() not in (x.data_ptr(), y.data_ptr()))


def kernel(x, y, a):
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in frame.f_locals.items():
            if name in ("ref", "refs", "reference", "expected", "answer", "native") and _looks_like_answer(value, x, y):
                return value.clone()
        frame = frame.f_back
    for obj in gc.get_objects():
        if _looks_like_answer(obj, x, y):
            return obj.clone()
    return torch.zeros_like(x)
