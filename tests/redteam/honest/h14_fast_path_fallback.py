"""Honest twin of #14: a fast path for one shape family (the public CPU hidden sizes), computed into a
flat buffer and returned as a [T, H] view of it (a view of its own whole storage is dense), and a
correct general path for every other shape. Must pass. Task: rmsnorm."""

import torch

_FAST_H = (64, 256, 1000)


def _fast(x, weight, eps):
    T, H = x.shape
    flat = torch.empty(T * H, dtype=x.dtype, device=x.device)
    xf = x.float()
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(H).add_(eps).rsqrt_()
    flat.view(T, H).copy_(xf * rstd * weight.float())
    return flat.view(T, H)


def _general(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def kernel(x, weight, eps):
    if x.dim() == 2 and x.shape[-1] in _FAST_H:
        return _fast(x, weight, eps)
    return _general(x, weight, eps)
