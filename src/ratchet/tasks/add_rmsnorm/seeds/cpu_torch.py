"""Residual add + RMSNorm in plain torch, fp32 math, rows in chunks so the fp32 temporaries stay in cache.

The add writes new_residual directly (torch adds bf16/fp16 in fp32 and rounds once, as vLLM does); the
norm is computed from that rounded sum with vector_norm, which accumulates the sum of squares without
materializing x^2; the scaling runs in place on one fp32 buffer per chunk. CHUNK == 0 means all rows.
"""

import torch

SPACE = {"CHUNK": [256, 64, 1024, 0]}


def kernel(x, residual, weight, eps, CHUNK=0):
    T, H = x.shape
    out = torch.empty_like(x)
    new_residual = torch.empty_like(x)
    w = weight.to(torch.float32)
    step = CHUNK or max(T, 1)
    for start in range(0, T, step):
        rows = slice(start, start + step)
        summed = torch.add(x[rows], residual[rows], out=new_residual[rows])
        # Never write into sf: for fp32 .to() returns new_residual's rows themselves, an output.
        sf = summed.to(torch.float32)
        norm = torch.linalg.vector_norm(sf, dim=-1, keepdim=True)
        rstd = norm.square_().div_(H).add_(eps).rsqrt_()
        if x.dtype == torch.float32:
            torch.mul(sf, rstd, out=out[rows]).mul_(w)
        else:
            # Multiplied in fp32 and rounded once on the store into out: no separate copy pass.
            torch.mul(torch.mul(sf, rstd), w, out=out[rows])
    return out, new_residual
