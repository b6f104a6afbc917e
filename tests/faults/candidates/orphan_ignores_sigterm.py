"""Fault: the kernel starts a child that ignores SIGTERM and sleeps; FAULT_MARKER is in its command line
so the test can look for it afterwards."""

import os
import subprocess
import sys

import torch

CHILDREN = []


def kernel(x, y, a):
    if not CHILDREN:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        CHILDREN.append(subprocess.Popen([sys.executable, "-c", code, os.environ["FAULT_MARKER"]]))
    return torch.add(y, x, alpha=a)
