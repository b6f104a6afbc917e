"""GPU fault: an allocation of a terabyte on the device."""

import torch


def kernel(x, y, a):
    return torch.empty(2**38, dtype=torch.float32, device=x.device)
