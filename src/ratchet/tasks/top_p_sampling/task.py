"""Top-p (nucleus) sampling: draw one token per row from the renormalized nucleus of softmax(logits).

The nucleus of a row is the smallest set of most probable tokens whose mass reaches ``top_p``: token i
is in it when the mass of the tokens strictly more probable than i is below ``top_p`` (so tied tokens
are all in or all out). Outputs are random, so correctness is statistical (a ``StatisticalRule``):

* every sampled token must lie in its row's nucleus (float64, tolerance ``_TOL`` on the mass for fp32
  rounding in honest kernels);
* the draws, pooled over rows and calls, must follow the renormalized nucleus distribution: a
  randomized probability integral transform (tokens by descending probability, u = (F(before token) +
  U * p(token)) / Z) is uniform for an honest sampler, and a KS test against U(0, 1) rejects at p <
  1e-4. False-reject rate: 1e-4 per shape (the KS threshold; the membership check rejects no honest
  kernel whose fp32 masses are within 1e-5). Greedy, top-k, ignoring top_p and wrong temperatures fail.
"""

import math

import numpy as np
import torch
from scipy import stats

from ratchet.task import Cost, ShapeRange, ShapeSet, StatisticalRule, Task

_TOL = 1e-5  # mass tolerance at the nucleus boundary: honest fp32 sums are off by ~1e-6 at most
_BAND = 1e-3  # rows whose boundary is ambiguous by more than this share of the nucleus mass skip the KS
_FALSE_REJECT = 1e-4


def reference(logits, top_p):
    """The honest baseline: sort, cut the nucleus by cumulative mass, sample with torch.multinomial."""
    probs = torch.softmax(logits, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of the tokens ranked above each token
    sorted_p = sorted_p.masked_fill(before >= top_p.to(probs.dtype)[:, None], 0.0)
    pick = torch.multinomial(sorted_p, 1)
    return order.gather(-1, pick).squeeze(-1)


def make_inputs(shape, dtype, device, generator):
    """Logits randn * c * sqrt(2 ln V), c log-uniform in [0.4, 1.4] per row, so nuclei range from one
    token to hundreds: for top_p < 0.95 the median nucleus holds ~15-25 tokens at V = 1k-4k (95th
    percentile 200-700) and ~250 at V = 128k (95th percentile ~10k); over half the rows hold more
    than 50, so top-k fails. top_p is uniform in [0.3, 0.95] except for a quarter of the rows near 1
    (1/8 in [0.95, 1), 1/8 exactly 1.0: the whole vocabulary)."""
    B, V = shape["B"], shape["V"]
    gen_dev = generator.device  # draw where the generator lives so every process makes the same inputs
    c = torch.exp(torch.empty(B, 1, device=gen_dev).uniform_(math.log(0.4), math.log(1.4), generator=generator))
    logits = torch.randn(B, V, device=gen_dev, generator=generator) * (c * math.sqrt(2 * math.log(V)))
    u = torch.rand(B, device=gen_dev, generator=generator)
    kind = torch.rand(B, device=gen_dev, generator=generator)
    top_p = torch.where(kind < 0.125, 1.0, torch.where(kind < 0.25, 0.95 + 0.05 * u, 0.3 + 0.65 * u))
    return logits.to(device=device, dtype=dtype), top_p.to(device=device, dtype=torch.float32)


# Rows are tested in blocks of about this many logits (~40 B of work arrays each): on a GPU, thousands
# of rows at once; on a CPU, a block whose arrays stay in cache (one 128k row: 2.5 ms, where 32 such
# rows at once took 6 ms each, 2026-12-03).
_BLOCK_LOGITS = {"cpu": 1 << 17, "cuda": 1 << 24}


def _rows_pit(x, tp, tok, U):
    """Rows of fp32 logits ``x`` [n, V] with their top_p (float64), sampled token and uniform draw U:
    (in nucleus?, mass strictly above the token, PIT value, PIT usable?), each [n].

    Works on sorted fp32 logits: exp is monotone, so their order is the probabilities' order and
    equal logits are exactly the tied tokens, and a token's rank is found by bisection. All rows at
    once, on the logits' device.
    """
    n, V = x.shape
    if x.device.type == "cpu":  # torch's CPU sort took 15x numpy's on 128k-logit rows (2026-12-03)
        asc = torch.from_numpy(np.sort(x.numpy(), axis=-1))
    else:
        asc = x.sort(dim=-1).values
    desc = asc.flip(-1)
    p = (desc.double() - desc[:, :1].double()).exp()  # float64 from here on
    p /= p.sum(-1, keepdim=True)
    cum = p.cumsum(-1)  # cum[:, j] = mass of ranks 0..j; the mass before rank j is cum[:, j - 1]

    def n_before_below(v):  # number of ranks whose mass before them is < v (v > 0)
        return 1 + torch.searchsorted(cum, v[:, None]).squeeze(-1).clamp(max=V - 1)

    def first(v):  # first rank holding logit v (= number of strictly more probable tokens)
        return V - torch.searchsorted(asc, v[:, None], right=True).squeeze(-1)

    def last(v):  # last rank holding logit v
        return V - 1 - torch.searchsorted(asc, v[:, None]).squeeze(-1)

    def at(t, j):
        return t.gather(-1, j.clamp(0, V - 1)[:, None]).squeeze(-1)

    def before(j):
        return torch.where(j > 0, at(cum, j - 1), torch.zeros_like(cum[:, 0]))

    # Allowed: the tie group's strict mass < tp + tol (a prefix of ranks, whole tie groups).
    n_a = last(at(desc, n_before_below(tp + _TOL) - 1)) + 1
    # Certain: even a sequential order of the ties puts the token's mass below tp - tol.
    n_s = torch.where(tp > _TOL, n_before_below(tp - _TOL), torch.zeros_like(n_a))
    j = n_s - 1
    d_j = at(desc, j)
    n_c = torch.where(n_s > 0, torch.where(last(d_j) == j, n_s, first(d_j)), torch.zeros_like(n_s))
    z_a, z_c = at(cum, n_a - 1), before(n_c)
    x_tok = x.gather(-1, tok[:, None]).squeeze(-1)
    g0, g1 = first(x_tok), last(x_tok)
    f = before(g0)
    inside = g0 < n_a
    usable = inside & (z_a - z_c <= _BAND * z_a)
    # Tied tokens are one atom of the PIT: which member a sampler returns is not a distribution error.
    return inside, f, (f + U * (at(cum, g1) - f)) / z_a, usable


def _blocks(rows):
    """(call, logits, top_p, tokens) rows grouped into blocks of one vocabulary size and about
    _BLOCK_LOGITS logits: (calls, logits, top_p, tokens) per block, tensors concatenated."""
    block, size = [], 0
    for row in rows:
        limit = _BLOCK_LOGITS.get(row[1].device.type, _BLOCK_LOGITS["cpu"])
        if block and (row[1].shape[1] != block[0][1].shape[1] or size + row[1].numel() > limit):
            yield _cat(block)
            block, size = [], 0
        block.append(row)
        size += row[1].numel()
    if block:
        yield _cat(block)


def _cat(block):
    calls = [c for c, x, _, _ in block for _ in range(x.shape[0])]
    return (calls, torch.cat([x for _, x, _, _ in block]), torch.cat([t for _, _, t, _ in block]),
            torch.cat([k for _, _, _, k in block]))


def _test(pairs):
    """Membership of every token, then a KS test of the pooled randomized PIT against U(0, 1).

    The pairs' tensors may lie on any device (the judge's): the test runs there, all rows at once."""
    if not pairs:
        return ["no draws to judge"]
    failures, rows = [], []
    for call, (inputs, outputs) in enumerate(pairs):
        logits, top_p = inputs[0], inputs[1]
        tokens = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        B, V = logits.shape
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64 or tuple(tokens.shape) != (B,):
            desc = f"{type(tokens).__name__} {getattr(tokens, 'dtype', '')} {tuple(getattr(tokens, 'shape', ()))}"
            failures.append(f"output must be an int64 tensor of shape [{B}], got {desc}")
            continue
        rows.append((call, logits.float(), top_p.to(device=logits.device, dtype=torch.float64),
                     tokens.to(logits.device)))
    if rows:  # one sync for every call's range check
        bad = torch.stack([((k < 0) | (k >= x.shape[1])).any() for _, x, _, k in rows]).tolist()
        for row, out in zip(list(rows), bad):
            if out:
                k, V = row[3], row[1].shape[1]
                failures.append(f"token ids must lie in [0, {V}), got {int(k.min())}..{int(k.max())}")
        rows = [row for row, out in zip(rows, bad) if not out]
    x0 = pairs[0][0][0].reshape(-1)[:16].float().cpu().numpy().view(np.uint32).astype(np.uint64)
    rng = np.random.default_rng([0x7E57, int(x0.sum())])  # U independent of the kernel's draws
    n_draws, outside, first_out, pit = 0, 0, None, []
    for calls, x, tp, tok in _blocks(rows):
        U = torch.from_numpy(rng.random(x.shape[0])).to(x.device)
        inside, mass, u, usable = _rows_pit(x, tp, tok, U)
        out_rows = (~inside).nonzero().flatten().tolist()
        if out_rows and first_out is None:
            i = out_rows[0]
            row = i - calls.index(calls[i])
            first_out = (calls[i], row, int(tok[i]), float(mass[i]), float(tp[i]))
        outside += len(out_rows)
        n_draws += x.shape[0]
        pit.append(u[usable].cpu().numpy())
    if outside:
        c, r, t, m, tp = first_out
        failures.append(
            f"{outside} of {n_draws} sampled tokens lie outside their row's nucleus (e.g. call {c} row {r}: "
            f"token {t} has {m:.6f} of mass strictly more probable than it, >= top_p {tp:.6f}; "
            "top_p ignored or the cutoff is wrong)"
        )
    pit = np.concatenate(pit) if pit else np.empty(0)
    if len(pit):
        res = stats.kstest(pit, "uniform")
        if res.pvalue < _FALSE_REJECT:
            mean = float(np.mean(pit))
            hint = (" (too concentrated on the most probable tokens: greedy, top-k or too low a temperature?)"
                    if mean < 0.5 else " (too spread toward the nucleus tail: too high a temperature?)")
            failures.append(
                f"sampled tokens do not follow the renormalized nucleus distribution: KS D={res.statistic:.4f}, "
                f"p={res.pvalue:.2e} < {_FALSE_REJECT:g} over {len(pit)} draws, PIT mean {mean:.3f} "
                f"(0.5 expected){hint}"
            )
    return failures


def _cost(shape, dtype):
    B, V = shape["B"], shape["V"]
    # Read the logits once (fp32) and top_p, write int64 ids; ~5 flops per logit (max, exp, sum, cut, pick).
    return Cost(bytes=B * V * 4 + B * 4 + B * 8, flops=5.0 * B * V)


def _weight(shape):
    return 2.0 if shape["B"] <= 64 else 1.0  # decode batches of 1 to 64 are most of the real work


TASK = Task(
    name="top_p_sampling",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"B": b, "V": v} for v in (128256, 129280) for b in (1, 16, 64, 256)],
        held_out=ShapeRange(dims={"B": (1, 300), "V": [128256, 129280, 32000, 100003]}),
    ),
    cpu=ShapeSet(
        public=[{"B": 1, "V": 1000}, {"B": 8, "V": 4099}, {"B": 64, "V": 1000}, {"B": 64, "V": 4099}],
        held_out=ShapeRange(dims={"B": (1, 40), "V": (500, 5000)}),
    ),
    dtypes=(torch.float32,),
    cost=_cost,
    weight=_weight,
    # One draw per row per call; B=1 shapes need max_calls >= min_draws to reach min_draws (calls are
    # ~0.1 ms on a GPU). 2048 draws detect top-k and a 1.3x temperature error (tests/test_task_top_p.py).
    # The test costs ~0.8 ms of CPU per 128k-token row (~1.7 s per GPU shape), ~0.1 s per CPU shape.
    check=StatisticalRule(test=_test, draws=lambda s: s["B"], min_draws=2048, max_calls=2048,
                          false_reject_rate=_FALSE_REJECT),
    # No library call computes top-p sampling as a whole; forbidding its parts (sort, multinomial) would
    # forbid the honest baseline, so nothing is forbidden.
    forbidden=(),
    description=(
        "Top-p (nucleus) sampling for LLM decoding: for each row of fp32 logits [B, V], draw one token id "
        "from softmax(logits) restricted to the nucleus (the most probable tokens whose mass first reaches "
        "top_p[b]; a token is in when the mass strictly more probable than it is below top_p), renormalized. "
        "Randomness must come from torch's RNG on the logits' device (torch.rand, exponential_, multinomial, "
        "or a Triton kernel seeded from a value drawn with it). Judged statistically: every token must be in "
        "its nucleus and the pooled draws must pass a KS test of their probability integral transform "
        "(false-reject rate 1e-4 per shape). The baseline sorts the whole vocabulary; sort-free kernels find "
        "the cutoff by bisection over probabilities and sample by a Gumbel-max race in one or few passes."
    ),
)
