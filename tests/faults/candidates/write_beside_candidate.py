"""Fault: write a file next to the candidate's own file, and rewrite the candidate itself."""

import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def kernel(x, y, a):
    with open(os.path.join(HERE, "planted.py"), "w") as f:
        f.write("x = 1\n")
    return torch.add(y, x, alpha=a)
