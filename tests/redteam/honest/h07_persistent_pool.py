"""Honest twin of #7: a module-level thread pool kept across calls (as a CPU kernel library keeps its
workers), created lazily on the first submit like every ThreadPoolExecutor. Each call waits for all of
its futures before returning; afterwards the pool's threads sit idle. Must pass. Task: axpby, timed."""

from concurrent.futures import ThreadPoolExecutor

import torch

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="axpby")


def kernel(x, y, a):
    n = x.numel()
    out = torch.empty_like(x)

    def part(lo, hi):
        torch.add(y[lo:hi], x[lo:hi], alpha=a, out=out[lo:hi])

    futures = [_POOL.submit(part, 0, n // 2), _POOL.submit(part, n // 2, n)]
    for f in futures:
        f.result()
    return out
