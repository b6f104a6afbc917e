"""Allowed: files in its own folder (the worker's working directory and TMPDIR are its scratch)."""

import os
import tempfile

import torch


def kernel(x, y, a):
    with open("scratch.txt", "w") as f:
        f.write("mine\n")
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("mine too\n")
    return torch.add(y, x, alpha=a)
