"""Survivable: the kernel changes the working directory, then answers honestly."""

import os

import torch


def kernel(x, y, a):
    os.chdir("/")
    return torch.add(y, x, alpha=a)
