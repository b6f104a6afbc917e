"""Seed: a sort-free top-p sampler in plain torch (CPU or GPU).

The nucleus is every token with p >= t, where t is the smallest probability whose strictly-larger mass
G(t) = sum(p[p > t]) is below top_p. G only drops as t grows, so t is found by bisection. Bisecting on
the fp32 bit pattern of t (non-negative floats order like their bits) pins t exactly after 31 steps:
no approximate cutoff. Then an exponential race (argmax p / E, E ~ Exp(1)) over the nucleus draws a
token with probability proportional to p, without normalizing.
"""

import torch

_INF_BITS = 0x7F800000  # bits of +inf: G(inf) = 0 < top_p, so hi starts there


def kernel(logits, top_p):
    probs = torch.softmax(logits.float(), dim=-1)
    B = probs.shape[0]
    tp = top_p.float()[:, None]
    # Invariant: G(lo) >= top_p (lo = -1 stands for "below every probability"), G(hi) < top_p.
    lo = torch.full((B, 1), -1, dtype=torch.int64, device=probs.device)
    hi = torch.full((B, 1), _INF_BITS, dtype=torch.int64, device=probs.device)
    for _ in range(31):  # ceil(log2(_INF_BITS + 1)) steps leave hi - lo == 1
        mid = (lo + hi) // 2
        t = mid.to(torch.int32).view(torch.float32)
        mass = torch.where(probs > t, probs, 0.0).sum(-1, keepdim=True)
        below = mass < tp
        hi = torch.where(below, mid, hi)
        lo = torch.where(below, lo, mid)
    t = hi.to(torch.int32).view(torch.float32)  # the exact smallest probability in the nucleus
    race = probs / torch.empty_like(probs).exponential_()
    return torch.where(probs >= t, race, -1.0).argmax(dim=-1)
