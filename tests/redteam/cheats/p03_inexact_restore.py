"""#3 mutating the inputs and "restoring" them inexactly: scale x in place by a, use it, then divide by
a again. (x * a) / a is not x in floating point for every element, so the inputs come back changed.
Task: axpby. input_mutated (the honest twin, honest/h03_restore_scratch.py, restores bit for bit)."""

import torch


def kernel(x, y, a):
    x.mul_(a)
    out = torch.add(y, x)
    x.div_(a)
    return out
