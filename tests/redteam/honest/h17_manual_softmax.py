"""Honest twin of #17: softmax written out (max, exp, sum, divide) without the library op.
Must pass. Task: redteam softmax_forbidden."""

import torch


def kernel(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)
