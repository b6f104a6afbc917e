"""Honest axpby for sleepy_axpby: sleeps 0.005 s per call up to N = 4000 and 0.02 s above (fast at the small shape, slow at the large)."""

import time

import torch


def kernel(x, y, a):
    time.sleep(0.005 if x.numel() <= 4000 else 0.02)
    return torch.add(y, x, alpha=a)
