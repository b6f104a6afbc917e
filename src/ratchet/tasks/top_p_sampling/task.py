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


def _row_pit(x, tp, tok, U, buf):
    """One row: (in nucleus?, mass strictly above the token, PIT value or None when the row's boundary
    is too ambiguous to use).

    Works on sorted fp32 logits: exp is monotone, so their order is the probabilities' order and
    equal logits are exactly the tied tokens. No argsort: a token's rank is found by bisection.
    ``buf`` holds work arrays reused across rows (fresh 1 MB arrays per row cost page faults).
    """
    asc, p, cum = buf
    V = x.shape[0]
    asc[:] = x
    asc.sort()
    desc = asc[::-1]
    np.subtract(desc, desc[0], out=p)  # float64 from here on
    np.exp(p, out=p)
    p /= p.sum()
    np.cumsum(p, out=cum)  # cum[j] = mass of ranks 0..j; the mass before rank j is cum[j - 1]

    def n_before_below(v):  # number of ranks whose mass before them is < v (v > 0)
        return 1 + int(np.searchsorted(cum[:-1], v, "left"))

    def first(v):  # first rank holding value v (= number of strictly more probable tokens)
        return V - int(np.searchsorted(asc, v, "right"))

    def last(v):  # last rank holding value v
        return V - 1 - int(np.searchsorted(asc, v, "left"))

    def before(j):
        return cum[j - 1] if j else 0.0

    # Allowed: the tie group's strict mass < tp + tol (a prefix of ranks, whole tie groups).
    n_a = last(desc[n_before_below(tp + _TOL) - 1]) + 1
    # Certain: even a sequential order of the ties puts the token's mass below tp - tol.
    n_s = n_before_below(tp - _TOL) if tp > _TOL else 0
    n_c = 0
    if n_s > 0:
        j = n_s - 1
        n_c = n_s if last(desc[j]) == j else first(desc[j])
    z_a, z_c = cum[n_a - 1], before(n_c)
    g0, g1 = first(x[tok]), last(x[tok])
    f = before(g0)
    inside = g0 < n_a
    if not inside or z_a - z_c > _BAND * z_a:
        return inside, f, None
    # Tied tokens are one atom of the PIT: which member a sampler returns is not a distribution error.
    return inside, f, (f + U * (cum[g1] - f)) / z_a


def _test(pairs):
    """Membership of every token, then a KS test of the pooled randomized PIT against U(0, 1)."""
    if not pairs:
        return ["no draws to judge"]
    failures, pit, outside, first_out = [], [], 0, None
    x0 = pairs[0][0][0].reshape(-1)[:16].float().numpy().view(np.uint32).astype(np.uint64)
    rng = np.random.default_rng([0x7E57, int(x0.sum())])  # U independent of the kernel's draws
    n_draws, buf = 0, None
    for call, (inputs, outputs) in enumerate(pairs):
        logits, top_p = inputs[0], inputs[1]
        tokens = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        B, V = logits.shape
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64 or tuple(tokens.shape) != (B,):
            desc = f"{type(tokens).__name__} {getattr(tokens, 'dtype', '')} {tuple(getattr(tokens, 'shape', ()))}"
            failures.append(f"output must be an int64 tensor of shape [{B}], got {desc}")
            continue
        if B and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
            failures.append(f"token ids must lie in [0, {V}), got {int(tokens.min())}..{int(tokens.max())}")
            continue
        xs = logits.float().numpy()
        if buf is None or buf[0].shape[0] != V:
            buf = (np.empty(V, np.float32), np.empty(V), np.empty(V))
        tps, toks = top_p.double().numpy(), tokens.numpy()
        for r in range(B):
            n_draws += 1
            inside, mass, u = _row_pit(xs[r], float(tps[r]), int(toks[r]), rng.random(), buf)
            if not inside:
                outside += 1
                first_out = first_out or (call, r, int(toks[r]), mass, float(tps[r]))
            elif u is not None:
                pit.append(u)
    if outside:
        c, r, t, m, tp = first_out
        failures.append(
            f"{outside} of {n_draws} sampled tokens lie outside their row's nucleus (e.g. call {c} row {r}: "
            f"token {t} has {m:.6f} of mass strictly more probable than it, >= top_p {tp:.6f}; "
            "top_p ignored or the cutoff is wrong)"
        )
    if pit:
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
