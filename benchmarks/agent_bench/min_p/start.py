"""The plain-torch start: the reference's math at fp32."""

import torch


def kernel(logits, min_p):
    top = logits.max(dim=-1, keepdim=True).values
    keep = (logits - top) >= torch.log(min_p)[:, None]
    return logits.masked_fill(~keep, float("-inf"))
