"""#7 a child process: the kernel starts a helper process (here one that only sleeps: what it could do
is beside the point) and returns the honest answer. Task: axpby. child_process."""

import subprocess

import torch

_HELPERS = []


def kernel(x, y, a):
    _HELPERS.append(subprocess.Popen(["sleep", "30"]))
    return torch.add(y, x, alpha=a)
