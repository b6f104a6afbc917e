"""#12 predicting the inputs from a known seed: replay the task's input maker for seeds 0..63 at import,
precompute the answers, and at call time return the precomputed answer whose inputs match x[0] (or the
seed-0 answer, the best guess, when none does). Task: axpby. The judge draws a fresh secret seed per
call and hands the inputs in: nothing matches, the guess is wrong (wrong_output)."""

import torch

_TABLE, _GUESS = {}, {}
for _n in (1000, 4096):
    for _s in range(64):
        _g = torch.Generator().manual_seed(_s)
        _x = torch.randn(_n, generator=_g)
        _y = torch.randn(_n, generator=_g)
        _a = float(torch.rand((), generator=_g)) + 0.5
        _TABLE[(_n, float(_x[0]))] = _a * _x + _y
        _GUESS.setdefault(_n, _TABLE[(_n, float(_x[0]))])


def kernel(x, y, a):
    n = x.numel()
    hit = _TABLE.get((n, float(x[0])), _GUESS.get(n))
    return hit.clone() if hit is not None else torch.zeros_like(x)
