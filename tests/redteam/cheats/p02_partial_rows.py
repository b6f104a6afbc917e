"""#2 partial work: normalize only the first 8 rows and leave the rest zero. Task: rmsnorm. Right on
the T=1 and T=7 shapes, wrong from T=64 on: the judge compares every element at several sizes."""

import torch

ROWS = 8


def kernel(x, weight, eps):
    out = torch.zeros_like(x)
    xf = x[:ROWS].float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out[:ROWS] = (xf * rstd * weight.float()).to(x.dtype)
    return out
