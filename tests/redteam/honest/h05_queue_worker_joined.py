"""Honest twin of #5 and #7 (the persistent-worker cheat's): a worker thread started at import takes each
call's second half from a queue while the calling thread does the first half, and the kernel waits for
the worker's done event before it returns. The thread outlives the call but sits idle on its queue, and
the output is complete at return. Must pass. Task: axpby, timed."""

import queue
import threading

import torch

_JOBS: queue.Queue = queue.Queue()


def _serve():
    while True:
        fn, done = _JOBS.get()
        try:
            fn()
        finally:
            done.set()


threading.Thread(target=_serve, name="axpby-half", daemon=True).start()


def kernel(x, y, a):
    n = x.numel()
    out = torch.empty_like(x)
    half = n // 2
    done = threading.Event()
    _JOBS.put((lambda: torch.add(y[half:], x[half:], alpha=a, out=out[half:]), done))
    torch.add(y[:half], x[:half], alpha=a, out=out[:half])
    done.wait()
    return out
