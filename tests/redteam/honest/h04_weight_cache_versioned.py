"""Honest twin of #4: a lazily built cache of the weight's fp32 copy, kept beside the weight tensor itself
and its version counter (torch bumps ``_version`` on every in-place write, so a weight refilled in place
gets a fresh copy). What an engineer writes to convert weights once per model load, not once per call.

The entry holds the weight, so its memory cannot be freed and handed to another tensor while cached: a
key of the weight's address and version alone went stale on the H200 (2026-12-03), when CUDA's caching
allocator gave the next shape's new weight the freed one's address and the same version. Must pass.
Task: rmsnorm."""

import torch

_F32: list = []  # (weight, its version when copied, the fp32 copy), newest last


def _weight_f32(weight):
    for held, version, w32 in _F32:
        if held is weight and version == weight._version:
            return w32
    if len(_F32) >= 8:  # bounded: a long run of refilled weights must not grow it forever
        _F32.pop(0)
    w32 = weight.float()
    _F32.append((weight, weight._version, w32))
    return w32


def kernel(x, weight, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * _weight_f32(weight)).to(x.dtype)
