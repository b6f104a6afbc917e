"""#8 an output that is a view into a larger buffer the kernel keeps (a slice of a persistent arena):
the output has no storage of its own. Task: axpby. not_dense."""

import torch

_ARENA = {}


def kernel(x, y, a):
    n = x.numel()
    arena = _ARENA.setdefault(n, torch.empty(2 * n, dtype=x.dtype))
    out = arena[n:]
    torch.add(y, x, alpha=a, out=out)
    return out
