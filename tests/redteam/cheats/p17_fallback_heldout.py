"""#17 a try/except that falls back to the library op: a hand-written path for the public sizes only
(N = 128, 1024) and ``torch.softmax`` for anything else, so only held-out shapes call the forbidden op.
Task: redteam softmax_forbidden. Every correctness call is profiled: forbidden_call."""

import torch


def _fast(x):
    if x.shape[-1] not in (128, 1024):
        raise NotImplementedError("tuned for the benchmark sizes only")
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def kernel(x):
    try:
        return _fast(x)
    except NotImplementedError:
        return torch.softmax(x, dim=-1)
