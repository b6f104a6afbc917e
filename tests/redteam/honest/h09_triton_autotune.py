"""Honest twin of #9 and #13 (GPU): a Triton kernel under ``triton.autotune`` over block sizes and warps,
keyed by the length: the first call of each length benchmarks the configs (Triton's own do_bench, which
reads CUDA events and never replaces them) and later calls launch the chosen one. Must pass.
Task: axpby on cuda."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4),
                          triton.Config({"BLOCK": 4096}, num_warps=8)], key=["n"])
@triton.jit
def _axpby(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)


def kernel(x, y, a):
    out = torch.empty_like(x)
    n = x.numel()
    _axpby[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, a, n)
    return out
