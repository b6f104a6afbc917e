"""Honest twin of #4: a lazily built cache of the weight's fp32 copy, keyed by the weight's address, shape,
dtype, device and its version counter (torch bumps ``_version`` on every in-place write, so a weight
refilled in place gets a new key and a fresh copy). What an engineer writes to convert weights once per
model load, not once per call; the key cannot go stale. Must pass. Task: rmsnorm."""

import torch

_F32: dict = {}


def _weight_f32(weight):
    key = (weight.data_ptr(), weight._version, tuple(weight.shape), weight.dtype, weight.device)
    w32 = _F32.get(key)
    if w32 is None:
        if len(_F32) >= 8:  # bounded: a long run of refilled weights must not grow it forever
            _F32.clear()
        w32 = _F32[key] = weight.float()
    return w32


def kernel(x, weight, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * _weight_f32(weight)).to(x.dtype)
