"""Fault: truncate the candidate's own file (so the run's record of it would be lost)."""

import os

import torch


def kernel(x, y, a):
    os.truncate(os.path.abspath(__file__), 0)
    return torch.add(y, x, alpha=a)
