"""#5 deferred GPU writes from a thread (GPU): return an unwritten CUDA output and let a thread launch
the real work a millisecond later, after the harness's synchronize. Task: axpby on cuda. The worker
fingerprints the outputs at return and again after the sync and the thread's end: deferred_write."""

import threading
import time

import torch


def _fill(out, x, y, a):
    time.sleep(0.001)
    torch.add(y, x, alpha=a, out=out)
    torch.cuda.synchronize()


def kernel(x, y, a):
    out = torch.empty_like(x)
    threading.Thread(target=_fill, args=(out, x, y, a), daemon=True).start()
    return out
