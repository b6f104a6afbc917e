"""Honest twin of #4: a module-level fp32 workspace per (shape, device), allocated once and reused by
every call of that shape; the result is computed afresh into it from this call's inputs and returned
as a new tensor. Allocation caching is honest; result caching is not. Must pass. Task: rmsnorm."""

import torch

_WORKSPACE = {}


def kernel(x, weight, eps):
    key = (tuple(x.shape), x.device)
    ws = _WORKSPACE.get(key)
    if ws is None:
        ws = _WORKSPACE[key] = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    ws.copy_(x)
    rstd = ws.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    ws.mul_(rstd).mul_(weight.float())
    return ws.to(x.dtype, copy=True)
