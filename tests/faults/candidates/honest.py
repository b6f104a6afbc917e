"""The honest twin judged after every fault: axpby with one torch call."""

import torch


def kernel(x, y, a):
    return torch.add(y, x, alpha=a)
