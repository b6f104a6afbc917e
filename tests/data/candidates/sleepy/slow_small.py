"""Honest axpby for sleepy_axpby: sleeps 0.02 s per call up to N = 4000 and 0.005 s above (slow at the small shape, fast at the large)."""

import time

import torch


def kernel(x, y, a):
    time.sleep(0.02 if x.numel() <= 4000 else 0.005)
    return torch.add(y, x, alpha=a)
