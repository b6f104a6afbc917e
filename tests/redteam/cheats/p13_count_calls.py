"""#13 counting calls: honest for the first six calls (two correctness calls for each of axpby's three
shapes), then return a cheap wrong answer (a copy of y) in warm-up and timing. Task: axpby, timed.
Timed outputs are checked too: timed_output_wrong."""

import torch

_CALLS = [0]


def kernel(x, y, a):
    _CALLS[0] += 1
    if _CALLS[0] <= 6:
        return torch.add(y, x, alpha=a)
    return y.clone()
