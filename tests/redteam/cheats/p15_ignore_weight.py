"""#15 degenerate inputs: skip the weight multiply (right when weight is all ones, as in a freshly
initialized model). Task: rmsnorm; the task draws weight = 1 + 0.25 * randn: wrong_output."""

import torch


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
