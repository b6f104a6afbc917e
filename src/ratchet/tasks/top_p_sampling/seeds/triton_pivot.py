"""Seed: a sort-free top-p sampler, one Triton program per row.

Passes over the row, BLOCK_V logits at a time (masked, so any V works), with lane-wise accumulators
reduced once per pass:
1. row max m, then s = sum(exp(x - m)), so p = exp(x - m) / s;
2. the pivot: the nucleus is p >= t for the smallest t with G(t) = sum(p[p > t]) < top_p. G only drops
   as t grows, and non-negative floats order like their bit patterns, so t's 32 bits are found
   RADIX_BITS at a time: each pass evaluates G at 2**RADIX_BITS candidates (the known high bits plus
   each next digit) and keeps the largest with G >= top_p. After 32 / RADIX_BITS passes every bit is
   fixed: t is exact, no approximate cutoff (RADIX_BITS = 1 is plain bisection);
3. a Gumbel-max race over the nucleus: argmax of x - log(E), E ~ Exp(1) from tl.rand, which draws a
   token with probability proportional to p without normalizing.
Every pass recomputes p the same way, so membership is decided consistently. The Philox seed is drawn
with torch's RNG on the device and loaded inside the kernel (no host sync).
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK_V": [1024, 512, 2048], "RADIX_BITS": [4, 2, 1], "num_warps": [8, 4, 16]}

_INF_BITS = tl.constexpr(0x7F800000)  # bits of +inf: G(inf) = 0 < top_p, so the answer lies below


@triton.jit
def _top_p_kernel(logits_ptr, top_p_ptr, seed_ptr, out_ptr, V, stride_row,
                  BLOCK_V: tl.constexpr, RADIX_BITS: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    cols = tl.arange(0, BLOCK_V)
    top_p = tl.load(top_p_ptr + row)

    # Pass 1: max, then sum of exp (two passes keep masked -inf lanes free of inf - inf).
    m_vec = tl.full([BLOCK_V], -float("inf"), tl.float32)
    for start in range(0, V, BLOCK_V):
        m_vec = tl.maximum(m_vec, tl.load(base + start + cols, mask=start + cols < V, other=-float("inf")))
    m = tl.max(m_vec, axis=0)
    s_vec = tl.full([BLOCK_V], 0.0, tl.float32)
    for start in range(0, V, BLOCK_V):
        s_vec += tl.exp(tl.load(base + start + cols, mask=start + cols < V, other=-float("inf")) - m)
    inv_s = 1.0 / tl.sum(s_vec, axis=0)

    # Pass 2: lo = the largest bit pattern b with G(b) >= top_p, -1 if none (then every p is in).
    # Candidates lo + j << shift cover the bracket left by the previous pass; clamped at +inf.
    digits = tl.arange(0, 2**RADIX_BITS).to(tl.int64)
    lo = tl.full([], -1, tl.int64)
    for level in range(32 // RADIX_BITS):
        shift = 32 - RADIX_BITS * (level + 1)
        cand = tl.minimum(tl.maximum(lo, 0) + (digits << shift), _INF_BITS)
        t = cand.to(tl.int32).to(tl.float32, bitcast=True)
        g = tl.full([2**RADIX_BITS, BLOCK_V], 0.0, tl.float32)
        for start in range(0, V, BLOCK_V):
            x = tl.load(base + start + cols, mask=start + cols < V, other=-float("inf"))
            p = (tl.exp(x - m) * inv_s)[None, :]
            g += tl.where(p > t[:, None], p, 0.0)
        lo = tl.maximum(lo, tl.max(tl.where(tl.sum(g, axis=1) >= top_p, cand, -1), axis=0))
    t = (lo + 1).to(tl.int32).to(tl.float32, bitcast=True)  # the exact smallest p in the nucleus

    # Pass 3: Gumbel-max over the nucleus, lane-wise winners, then the best lane.
    seed = tl.load(seed_ptr)
    best_key = tl.full([BLOCK_V], -float("inf"), tl.float32)
    best_idx = tl.full([BLOCK_V], 0, tl.int32)
    for start in range(0, V, BLOCK_V):
        offs = start + cols
        valid = offs < V
        x = tl.load(base + offs, mask=valid, other=-float("inf"))
        p = tl.exp(x - m) * inv_s
        v = tl.rand(seed, row.to(tl.int64) * V + offs)  # [0, 1), fine-grained near 0
        # E = -log(1 - v) ~ Exp(1); the series keeps small E exact (1 - v would round to 1 in fp32).
        e = tl.where(v < 1e-3, v * (1.0 + 0.5 * v), -tl.log(1.0 - v))
        key = tl.where(valid & (p >= t), x - tl.log(e), -float("inf"))
        better = key > best_key
        best_key = tl.where(better, key, best_key)
        best_idx = tl.where(better, offs, best_idx)
    lane = tl.argmax(best_key, axis=0)
    token = tl.sum(tl.where(cols == lane, best_idx, 0), axis=0)
    tl.store(out_ptr + row, token.to(tl.int64))


def kernel(logits, top_p, BLOCK_V=1024, RADIX_BITS=4, num_warps=8):
    logits = logits.contiguous()
    B, V = logits.shape
    out = torch.empty(B, dtype=torch.int64, device=logits.device)
    seed = torch.randint(0, 2**31 - 1, (1,), device=logits.device, dtype=torch.int64)
    _top_p_kernel[(B,)](logits, top_p.contiguous().float(), seed, out, V, logits.stride(0),
                        BLOCK_V=BLOCK_V, RADIX_BITS=RADIX_BITS, num_warps=num_warps)
    return out
