"""Honest axpby that sleeps 3 ms per call up to N = 2000: fast at the large shape, slow at the small."""

import time

import torch


def kernel(x, y, a):
    if x.numel() <= 2000:
        time.sleep(0.003)
    return torch.add(y, x, alpha=a)
