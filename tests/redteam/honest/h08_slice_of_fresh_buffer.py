"""Honest twin of #8: computes into a fresh buffer wider than the output (each row padded past H to a
multiple of 64 elements, as a vectorized kernel's store wants) and returns ``buf[:, :H].contiguous()``.
At T = 1 that slice is already contiguous, so ``.contiguous()`` returns the view itself: a view whose
storage is larger than it, but fresh and held by nothing else once the kernel returns. Must pass.
Task: rmsnorm (its CPU shapes include T = 1)."""

import torch


def kernel(x, weight, eps):
    T, H = x.shape
    padded = (H // 64 + 1) * 64
    buf = torch.empty(T, padded, dtype=x.dtype, device=x.device)
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    buf[:, :H] = (xf * rstd * weight.float()).to(x.dtype)
    return buf[:, :H].contiguous()
