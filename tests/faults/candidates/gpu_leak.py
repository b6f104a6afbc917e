"""Survivable on the GPU: the kernel keeps 8 GiB of device memory alive in a module list (a leak), and
answers honestly. The memory must be back once the evaluation ends."""

import torch

HOARD = []


def kernel(x, y, a):
    if not HOARD:
        HOARD.append(torch.ones(2 * 2**30, dtype=torch.float32, device=x.device))
    return torch.add(y, x, alpha=a)
