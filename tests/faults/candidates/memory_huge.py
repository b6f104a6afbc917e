"""Fault: one allocation far beyond the machine (a terabyte of float32)."""

import torch


def kernel(x, y, a):
    return torch.empty(2**38, dtype=torch.float32) + 1
