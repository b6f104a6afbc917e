"""#4 caching by shape: compute once per (shape, dtype), return the cached answer ever after.
Task: rmsnorm. Fresh inputs per call: the second call of every shape is wrong (wrong_output)."""

import torch

_CACHE = {}


def kernel(x, weight, eps):
    key = (tuple(x.shape), x.dtype)
    if key not in _CACHE:
        xf = x.float()
        _CACHE[key] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return _CACHE[key].clone()
