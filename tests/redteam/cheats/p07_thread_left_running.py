"""#7 a background thread left running: the kernel starts a thread that computes the answer 30 ms later
(long after the worker's short settle) and returns. Task: axpby, timed. background_thread."""

import threading
import time

import torch


def _fill(out, x, y, a):
    time.sleep(0.03)
    torch.add(y, x, alpha=a, out=out)


def kernel(x, y, a):
    out = torch.empty_like(x)
    threading.Thread(target=_fill, args=(out, x, y, a), daemon=True).start()
    return out
