"""Not a hang: a first call that spends its time in a compiler child process (FAULT_COMPILER, a program
named like one, that runs FAULT_COMPILE_S seconds), then returns the honest answer."""

import os
import subprocess

import torch


def kernel(x, y, a):
    if not os.environ.get("FAULT_COMPILED"):
        subprocess.run([os.environ["FAULT_COMPILER"], os.environ["FAULT_COMPILE_S"]], check=True)
        os.environ["FAULT_COMPILED"] = "1"
    return torch.add(y, x, alpha=a)
