"""Honest axpby that sleeps 3 ms per call above N = 2000: fast at the small shape, slow at the large."""

import time

import torch


def kernel(x, y, a):
    if x.numel() > 2000:
        time.sleep(0.003)
    return torch.add(y, x, alpha=a)
