import torch


def kernel(p):
    return torch.bernoulli(p)
