"""#19 reading uninitialised memory: a blocked kernel that handles whole blocks of 256 and never writes
the tail, returning whatever the allocator left there (N = 4096 is exact, N = 1000 leaves 232).
Task: axpby. The judge poisons free memory before correctness calls: unwritten_output."""

import torch

BLOCK = 256


def kernel(x, y, a):
    out = torch.empty_like(x)
    n = x.numel() // BLOCK * BLOCK
    torch.add(y[:n], x[:n], alpha=a, out=out[:n])
    return out
