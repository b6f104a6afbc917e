"""Seed: a sort-free top-p sampler in plain torch (CPU or GPU): one histogram pass finds the cutoff.

The nucleus is every token with p >= t, where t is the smallest probability whose strictly-larger mass
is below top_p. Non-negative fp32 values order like their bit patterns, so the top bits of a
probability (``bits >> BUCKET_SHIFT``: the exponent and the first mantissa bits) name a bucket, and
buckets order like the probabilities in them. One pass sums the mass per (row, bucket)
(``torch.bincount``); a cumulative sum over the few buckets, from the top, finds the bucket where the
mass reaches top_p. Tokens in higher buckets are in, tokens in lower ones out; only the tokens of that
one bucket (a few per row) are sorted to pin t exactly: no full-vocabulary sort and no approximate
cutoff (ties with t are all kept, as the task allows). Then one token is drawn from the nucleus:

* ``SAMPLER="cdf"``: inverse CDF with one uniform per row: a cumulative sum of the nucleus mass in
  vocabulary order and a binary search (``torch.searchsorted``);
* ``SAMPLER="race"``: an exponential race, argmax of p / E with E ~ Exp(1) per token, restricted to the
  nucleus (no normalization, no cumulative sum, but one exponential per token).

The histogram path costs dozens of small torch ops, which dominate tiny inputs: at most ``SMALL``
logits (B * V) take a short path instead: torch.topk of 256 candidates per row, which holds the nucleus
of most rows (the rest are sorted in full, cheap at that size), cut by cumulative mass and sampled by
inverse CDF on the sorted cumulative sum.

Tuning: a larger BUCKET_SHIFT means fewer, wider buckets (a cheap histogram, more tokens to sort in the
crossing bucket); a smaller one the opposite. All randomness comes from torch's RNG on the device.
"""

import torch

SPACE = {"SMALL": [3000, 0], "BUCKET_SHIFT": [20, 23, 16], "SAMPLER": ["cdf", "race"]}

_ONE_BITS = 0x3F800000  # bits of 1.0f: no probability lies above it
_SMALL_K = 256  # candidates per row on the small-input path


def kernel(logits, top_p, SMALL=3000, BUCKET_SHIFT=20, SAMPLER="cdf"):
    probs = torch.softmax(logits.float(), dim=-1)
    tp = top_p.float()
    if probs.numel() <= SMALL:
        return _small(probs, tp)
    t = _cutoff(probs, tp, BUCKET_SHIFT)[:, None]
    # In place from here: fresh megabyte temporaries cost page faults on every call.
    if SAMPLER == "race":
        race = torch.empty_like(probs).exponential_()  # E ~ Exp(1) per token
        return torch.div(probs, race, out=race).masked_fill_(probs < t, -1.0).argmax(dim=-1)
    cum = probs.masked_fill_(probs < t, 0.0).cumsum_(dim=-1)
    # u in (0, Z]: the first token whose cumulative mass reaches u has p > 0 and lies in the nucleus.
    u = (1.0 - torch.rand(probs.shape[0], 1, device=probs.device)) * cum[:, -1:]
    return torch.searchsorted(cum, u).squeeze(-1)


def _small(probs, tp):
    """Tiny inputs: partial selection. The top _SMALL_K tokens of a row, sorted, hold its whole nucleus
    when their mass reaches top_p (every lower-ranked token has that much mass ranked above it); the
    other rows are sorted in full (cheap at this size). The nucleus is cut by cumulative mass as the
    reference cuts it and sampled by inverse CDF, which skips torch.multinomial."""
    vals, idx = probs.topk(min(_SMALL_K, probs.shape[-1]), dim=-1)
    cum = vals.cumsum(dim=-1)
    rest = (cum[:, -1] < tp).nonzero().squeeze(1)
    if rest.numel() == probs.shape[0]:
        return _cut_and_draw(*probs.sort(dim=-1, descending=True), tp)
    out = _cut_and_draw(vals, idx, tp, cum)
    if rest.numel():
        sorted_p, order = probs.index_select(0, rest).sort(dim=-1, descending=True)
        out.index_copy_(0, rest, _cut_and_draw(sorted_p, order, tp.index_select(0, rest)))
    return out


def _cut_and_draw(sorted_p, order, tp, cum=None):
    """Keep the ranks whose mass ranked above is below top_p (a prefix); draw u in (0, Z] and take the
    first rank whose cumulative mass reaches it."""
    cum = sorted_p.cumsum(dim=-1) if cum is None else cum
    n = ((cum - sorted_p) < tp[:, None]).sum(dim=-1, keepdim=True).clamp_(min=1)  # nucleus size
    u = (1.0 - torch.rand(n.shape, device=cum.device)) * cum.gather(-1, n - 1)
    return order.gather(-1, torch.searchsorted(cum, u)).squeeze(-1)


def _cutoff(probs, tp, shift):
    """Per row, the smallest probability in the nucleus (0 where the row's whole mass is below top_p,
    e.g. top_p = 1: every token is in)."""
    B, V = probs.shape
    dev = probs.device
    nb = (_ONE_BITS >> shift) + 1
    bits = probs.view(torch.int32)
    offsets = torch.arange(0, B * nb, nb, device=dev, dtype=torch.int32)[:, None]
    # Bucket b of row r is bin r * nb + b; buckets order like the probabilities in them.
    bins = (bits >> shift).add_(offsets)
    hist = torch.bincount(bins.view(-1), probs.view(-1), minlength=B * nb)
    desc = hist.view(B, nb).flip(-1).cumsum(dim=-1)  # desc[:, j]: mass of the top j + 1 buckets
    j = (desc < tp[:, None]).sum(dim=-1)  # whole top buckets whose mass stays below top_p
    crossed = j < nb
    above = torch.where(j > 0, desc.gather(1, (j - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
    b_star = torch.where(crossed, (nb - 1) - j, -1).to(torch.int32)  # the bucket where the mass crosses
    t = torch.zeros(B, device=dev)
    idx = (bins == b_star[:, None] + offsets).view(-1).nonzero().squeeze(1)  # its tokens, flat, row-major
    if idx.numel() == 0:  # no row crossed: every row keeps its whole vocabulary
        return t
    last = idx.numel() - 1
    # Sort the crossing bucket's tokens by (row ascending, probability descending) in one 1-D sort.
    key = (idx // V) * (1 << 30) + ((1 << 30) - 1 - bits.view(-1)[idx].long())
    key, order = key.sort()
    v = probs.view(-1)[idx[order]]
    rows = key >> 30
    counts = torch.bincount(rows, minlength=B)
    starts = counts.cumsum(0) - counts
    excl = v.double().cumsum(0) - v  # exclusive prefix mass over all rows (float64: rows are long)
    before = above.double()[rows] + excl - excl[starts.clamp(max=last)][rows]  # mass ranked above
    n_in = torch.bincount(rows, weights=(before < tp.double()[rows]).double(), minlength=B).long()
    return torch.where(counts > 0, v[(starts + n_in.clamp(min=1) - 1).clamp(max=last)], t)
