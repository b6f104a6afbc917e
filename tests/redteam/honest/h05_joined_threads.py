"""Honest twin of #5 and #7: splits the work across helper threads that all finish before return: half
through ``with ThreadPoolExecutor`` (its exit joins the pool), half on a plain thread joined explicitly.
No thread outlives the call and the output is complete at return: must pass. Task: axpby, timed."""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch


def kernel(x, y, a):
    n = x.numel()
    out = torch.empty_like(x)

    def part(lo, hi):
        torch.add(y[lo:hi], x[lo:hi], alpha=a, out=out[lo:hi])

    half = n // 2
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(part, 0, half // 2), pool.submit(part, half // 2, half)]
    for f in futures:
        f.result()
    helper = threading.Thread(target=part, args=(half, n))
    helper.start()
    helper.join()
    return out
