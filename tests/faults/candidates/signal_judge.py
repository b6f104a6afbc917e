"""Fault: SIGTERM to the judge (the worker's grandparent's parent: every ancestor is tried)."""

import os
import signal

import psutil
import torch


def kernel(x, y, a):
    for parent in psutil.Process().parents():
        os.kill(parent.pid, signal.SIGTERM)
    return torch.add(y, x, alpha=a)
