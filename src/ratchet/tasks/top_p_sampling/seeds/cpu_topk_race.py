"""Seed: top-p sampling by partial selection (torch.topk) with an exact per-row fallback, plain torch.

Most nuclei are small: ``torch.topk`` picks the K most probable tokens of every row, sorted, which
costs far less than sorting the vocabulary. A row whose top-K mass reaches top_p has its whole nucleus
among them (every lower-ranked token has at least that mass ranked above it), and the nucleus is cut
there exactly as the reference cuts the full sort. Only the other rows (large nuclei, top_p near or at
1) are sorted in full, row by row rather than the whole batch. The token is then drawn from the
nucleus of the sorted candidates:

* ``SAMPLER="race"``: an exponential race, argmax of p / E with E ~ Exp(1) (``exponential_``), over
  the kept candidates: no normalization, no cumulative search;
* ``SAMPLER="cdf"``: inverse CDF, one uniform per row scaled by the nucleus mass and a binary search
  (``torch.searchsorted``) in the cumulative sum the cut already computed.

Tuning: a larger K covers more rows (fewer full sorts) but costs more per row; the best K depends on
the nucleus sizes and on V. All randomness comes from torch's RNG on the logits' device.
"""

import torch

SPACE = {"K": [64, 16, 256, 1024], "SAMPLER": ["race", "cdf"]}


def _sample(sorted_p, order, top_p, sampler, cum=None):
    """Draw one token per row from the nucleus of descending-sorted probabilities."""
    cum = sorted_p.cumsum(dim=-1) if cum is None else cum
    keep = (cum - sorted_p) < top_p[:, None]  # mass ranked above each token is below top_p
    if sampler == "race":
        race = torch.empty_like(sorted_p).exponential_()
        pick = torch.div(sorted_p, race, out=race).masked_fill_(~keep, -1.0).argmax(dim=-1, keepdim=True)
    else:
        n = keep.sum(dim=-1, keepdim=True).clamp_(min=1)  # nucleus size: the kept ranks are a prefix
        u = (1.0 - torch.rand(n.shape, device=cum.device)) * cum.gather(-1, n - 1)  # u in (0, Z]
        pick = torch.searchsorted(cum, u)
    return order.gather(-1, pick).squeeze(-1)


def kernel(logits, top_p, K=64, SAMPLER="race"):
    probs = torch.softmax(logits.float(), dim=-1)
    tp = top_p.float()
    B, V = probs.shape
    if K >= V:
        return _sample(*probs.sort(dim=-1, descending=True), tp, SAMPLER)
    vals, idx = probs.topk(K, dim=-1, sorted=True)
    cum = vals.cumsum(dim=-1)
    # Rows whose top-K mass reaches top_p have their whole nucleus among the top K; the rest fall back.
    rest = (cum[:, -1] < tp).nonzero().squeeze(1)
    if rest.numel() == B:
        return _sample(*probs.sort(dim=-1, descending=True), tp, SAMPLER)
    out = _sample(vals, idx, tp, SAMPLER, cum)
    if rest.numel():
        sub = probs.index_select(0, rest)
        out.index_copy_(0, rest, _sample(*sub.sort(dim=-1, descending=True), tp.index_select(0, rest), SAMPLER))
    return out
