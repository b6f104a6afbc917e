"""#16 lower precision than the task allows: do the fp32 (and fp16) math in bf16. Task: rmsnorm. The
bf16 rows pass (bf16 tolerance), fp16 and fp32 do not: wrong_output."""

import torch


def kernel(x, weight, eps):
    xb, wb = x.to(torch.bfloat16), weight.to(torch.bfloat16)
    rstd = torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + eps)
    return (xb * rstd * wb).to(x.dtype)
