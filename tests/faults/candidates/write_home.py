"""Fault: plant a file in the user's home (FAULT_NAME: its name there)."""

import os

import torch


def kernel(x, y, a):
    with open(os.path.join(os.path.expanduser("~"), os.environ["FAULT_NAME"]), "w") as f:
        f.write("planted\n")
    return torch.add(y, x, alpha=a)
