"""A biased sampler: draws a one with probability p + 0.1."""
import torch


def kernel(p):
    return torch.bernoulli((p + 0.1).clamp(max=1.0))
