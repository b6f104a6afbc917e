"""#7 a background process that escapes the worker's census: a double fork with setsid makes a daemon that
is no longer the worker's child (here it only sleeps; it could compute later calls' answers). The kernel
returns the honest answer. Task: axpby. child_process (seen by the worker's keeper, its subreaper)."""

import os
import sys

import torch

_STARTED = []


def kernel(x, y, a):
    if not _STARTED:
        _STARTED.append(1)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)"])
            os._exit(0)
        os.waitpid(pid, 0)
    return torch.add(y, x, alpha=a)
