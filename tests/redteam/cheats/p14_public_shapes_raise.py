"""#14 only the tested shapes: a kernel "tuned" for the public sizes that refuses any other.
Task: axpby (public N = 1000, 4096; held-out N odd). shape_unsupported."""

import torch


def kernel(x, y, a):
    if x.numel() not in (1000, 4096):
        raise ValueError(f"no tuned config for N={x.numel()}")
    return torch.add(y, x, alpha=a)
