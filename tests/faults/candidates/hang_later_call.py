"""Fault: the first calls return honestly, then one call never returns (a hang past the first call)."""

import torch

CALLS = []


def kernel(x, y, a):
    CALLS.append(1)
    if len(CALLS) > 2:
        while True:
            pass
    return torch.add(y, x, alpha=a)
