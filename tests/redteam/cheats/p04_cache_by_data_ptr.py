"""#4 caching by data_ptr: remember the output per input address and return it when the same buffers
come back. The judge refills the same buffers in place with fresh data for each call of a shape, so the
second call gets the first call's answer. Task: axpby. wrong_output."""

import torch

_CACHE = {}


def kernel(x, y, a):
    key = (x.data_ptr(), y.data_ptr(), x.numel())
    if key not in _CACHE:
        _CACHE[key] = torch.add(y, x, alpha=a)
    return _CACHE[key].clone()
