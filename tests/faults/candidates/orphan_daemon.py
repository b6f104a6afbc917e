"""Fault: a double-fork daemon (fork, setsid, fork, exec sleep): it leaves the worker's process tree and
session at once, where the worker's own census cannot see it. FAULT_MARKER names it."""

import os
import sys

import torch

STARTED = []


def kernel(x, y, a):
    if not STARTED:
        STARTED.append(1)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", os.environ["FAULT_MARKER"]])
            os._exit(0)
        os.waitpid(pid, 0)
    return torch.add(y, x, alpha=a)
