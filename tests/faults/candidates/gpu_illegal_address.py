"""GPU fault: a Triton store a terabyte past its output (an illegal address): the worker's CUDA context is
lost, the worker ends, and the verdict's detail is CUDA's own error line."""

import torch
import triton
import triton.language as tl


@triton.jit
def _store_far(out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK).to(tl.int64) + (1 << 40)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), dtype=tl.float32))


def kernel(x, y, a):
    out = torch.empty_like(x)
    _store_far[(1,)](out, BLOCK=128)
    return out
