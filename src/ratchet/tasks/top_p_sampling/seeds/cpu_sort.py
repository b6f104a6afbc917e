"""Seed: the textbook sort-based top-p sampler in plain torch (CPU or GPU).

Sort the probabilities, cut where the mass of the tokens above reaches top_p, sample with
torch.multinomial. ``prefilter_k`` > 0 sorts only the top-k candidates (torch.topk) when their mass
already reaches top_p in every row, which is exact then (the nucleus lies inside them), and falls back
to the full sort otherwise; the check costs one host sync.
"""

import torch

SPACE = {"prefilter_k": [0, 1024, 4096]}


def _sample_sorted(sorted_p, order, top_p):
    before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of the tokens ranked above each token
    sorted_p = sorted_p.masked_fill(before >= top_p[:, None], 0.0)
    return order.gather(-1, torch.multinomial(sorted_p, 1)).squeeze(-1)


def kernel(logits, top_p, prefilter_k=0):
    probs = torch.softmax(logits.float(), dim=-1)
    top_p = top_p.float()
    if 0 < prefilter_k < probs.shape[-1]:
        vals, idx = probs.topk(prefilter_k, dim=-1, sorted=True)
        # Rows whose top-k mass reaches top_p have their whole nucleus among the top k.
        if bool((vals.sum(-1) >= top_p).all()):
            return _sample_sorted(vals, idx, top_p)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    return _sample_sorted(sorted_p, order, top_p)
