"""#15 degenerate inputs: hard-code eps = 1e-6 (right for one family of models). Task: rmsnorm; the task
draws eps from {1e-6, 1e-5} per call and rows as small as 0.1 in scale, so on fp32 the eps error
(about 5e-4 relative) is far beyond rtol 1e-5: wrong_output."""

import torch


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
