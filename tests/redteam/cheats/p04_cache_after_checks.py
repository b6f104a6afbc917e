"""#4 caching that starts only after the correctness checks: honest for the first two calls of each
shape (the judge's two correctness calls), then the cached answer (a fast "kernel" in timing).
Task: axpby, timed. The judge checks the outputs of timed calls too (the first always, then a random
share chosen after the call): timed_output_wrong."""

import torch

_SEEN = {}
_LAST = {}


def kernel(x, y, a):
    key = x.numel()
    _SEEN[key] = _SEEN.get(key, 0) + 1
    if _SEEN[key] <= 2 or key not in _LAST:
        _LAST[key] = torch.add(y, x, alpha=a)
    return _LAST[key]
