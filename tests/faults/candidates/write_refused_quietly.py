"""A candidate that tries to write the ledger, swallows the refusal and answers honestly: it passes, and
the file is unchanged (the box, not a verdict, is what protects it)."""

import os

import torch


def kernel(x, y, a):
    try:
        with open(os.environ["FAULT_TARGET"], "r+b") as f:
            f.write(b"\0" * 100)
    except OSError:
        pass
    return torch.add(y, x, alpha=a)
