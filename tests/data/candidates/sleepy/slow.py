"""Honest axpby for sleepy_axpby: sleeps 0.02 s per call up to N = 4000 and 0.02 s above (slow at both shapes (honest, 10x the fast one))."""

import time

import torch


def kernel(x, y, a):
    time.sleep(0.02 if x.numel() <= 4000 else 0.02)
    return torch.add(y, x, alpha=a)
