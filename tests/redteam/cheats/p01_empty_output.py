"""#1 allocator reuse: compute nothing and return freshly allocated memory, hoping it still holds the
answer a reference run left behind in the same process (CUDA's caching allocator hands the same block
back). Task: axpby. The judge never runs the reference in the candidate's worker and fills free memory
with 0xFF before correctness calls, so the output shows the poison: unwritten_output."""

import torch


def kernel(x, y, a):
    return torch.empty_like(x)
