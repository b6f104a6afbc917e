"""The plain-torch start: the add, the norm in fp32, the per-row scale, the cast to e4m3."""

import torch


def kernel(x, residual, weight, eps):
    new_residual = x + residual
    r = new_residual.float()
    y = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    scale = (y.abs().amax(dim=-1, keepdim=True) / 448.0).clamp(min=1e-12)
    q = (y / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale, new_residual
