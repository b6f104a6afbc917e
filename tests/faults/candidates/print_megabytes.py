"""Fault: megabytes on stdout and stderr at every call, then the honest answer."""

import sys

import torch

BLOCK = "spam " * 200_000 + "\n"  # 1 MB


def kernel(x, y, a):
    for _ in range(4):
        sys.stdout.write(BLOCK)
        sys.stderr.write(BLOCK)
    return torch.add(y, x, alpha=a)
