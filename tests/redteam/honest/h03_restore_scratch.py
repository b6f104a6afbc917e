"""Honest twin of #3: uses its inputs as scratch and restores them bit for bit before returning.
x is negated in place and negated back (negation is exact); y is overwritten and copied back from a
saved clone. The inputs after the call are identical to those before: must pass. Task: axpby."""

import torch


def kernel(x, y, a):
    saved_y = y.clone()
    x.neg_()
    y.mul_(0.5)  # y as scratch: its values are wrong from here until the copy back below
    out = torch.sub(saved_y, x, alpha=a)  # y - a * (-x) = y + a * x
    x.neg_()
    y.copy_(saved_y)
    return out
