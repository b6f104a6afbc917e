"""axpby that is right up to N = 2000 and wrong above: it fails only at the larger public shape."""

import torch


def kernel(x, y, a):
    out = torch.add(y, x, alpha=a)
    if x.numel() > 2000:
        out[-1] += 1.0
    return out
