"""Fault: append to a file in /tmp at every call (FAULT_TARGET: its path)."""

import os

import torch


def kernel(x, y, a):
    with open(os.environ["FAULT_TARGET"], "a") as f:
        f.write("called\n")
    return torch.add(y, x, alpha=a)
