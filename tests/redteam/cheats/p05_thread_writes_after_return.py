"""#5 deferred work on a thread: allocate the output, start a thread that fills it a millisecond later,
and return at once, so the timed call measures only the launch. Task: axpby, timed. The worker
fingerprints the outputs right at return and again once new threads have finished: deferred_write."""

import threading
import time

import torch


def _fill(out, x, y, a):
    time.sleep(0.001)
    torch.add(y, x, alpha=a, out=out)


def kernel(x, y, a):
    out = torch.empty_like(x)
    threading.Thread(target=_fill, args=(out, x, y, a), daemon=True).start()
    return out
