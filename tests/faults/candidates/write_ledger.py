"""Fault: overwrite the first 100 bytes of the ledger (FAULT_TARGET: its path)."""

import os

import torch


def kernel(x, y, a):
    with open(os.environ["FAULT_TARGET"], "r+b") as f:
        f.write(b"\0" * 100)
    return torch.add(y, x, alpha=a)
