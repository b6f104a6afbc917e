"""Seed: a sort-free top-p sampler in one Triton program per row.

Passes over the row (BLOCK_V logits at a time, masked, so any V works):
1. online max m and sum s of exp(x - m), so p = exp(x - m) / s;
2. 31 bisection passes over the fp32 bit pattern of the cutoff t (non-negative floats order like their
   bits): G(t) = sum(p[p > t]) only drops as t grows, and the nucleus is p >= t for the smallest t with
   G(t) < top_p. After 31 halvings of [0, bits(inf)] the bracket is one float wide, so t is exact;
3. a Gumbel-max race, argmax of x - log(E) over the nucleus with E = -log(U), U from tl.rand: a draw
   proportional to p without normalizing.
The Philox seed is drawn with torch's RNG on the device and read inside the kernel (no host sync).
Every pass recomputes p the same way, so membership is decided consistently.
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK_V": [4096, 2048, 8192, 1024], "num_warps": [8, 4, 16]}


@triton.jit
def _top_p_kernel(logits_ptr, top_p_ptr, seed_ptr, out_ptr, V, stride_row, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    cols = tl.arange(0, BLOCK_V)
    top_p = tl.load(top_p_ptr + row)

    # Pass 1: row max and sum of exp (online rescaling keeps it one pass).
    m = -float("inf")
    s = 0.0
    for start in range(0, V, BLOCK_V):
        x = tl.load(base + start + cols, mask=start + cols < V, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    inv_s = 1.0 / s

    # Pass 2: bisection on the cutoff's bits. lo = -1 means "below every p" (G = everything).
    lo = -1
    hi = 0x7F800000
    for _ in range(31):
        mid = (lo + hi) // 2
        t = mid.to(tl.int32).to(tl.float32, bitcast=True)
        g = 0.0
        for start in range(0, V, BLOCK_V):
            x = tl.load(base + start + cols, mask=start + cols < V, other=-float("inf"))
            p = tl.exp(x - m) * inv_s
            g += tl.sum(tl.where(p > t, p, 0.0), axis=0)
        below = g < top_p
        hi = tl.where(below, mid, hi)
        lo = tl.where(below, lo, mid)
    t = hi.to(tl.int32).to(tl.float32, bitcast=True)

    # Pass 3: Gumbel-max over the nucleus.
    seed = tl.load(seed_ptr)
    best_key = -float("inf")
    best_idx = 0
    for start in range(0, V, BLOCK_V):
        offs = start + cols
        valid = offs < V
        x = tl.load(base + offs, mask=valid, other=-float("inf"))
        p = tl.exp(x - m) * inv_s
        u = tl.rand(seed, row.to(tl.int64) * V + offs)
        key = x - tl.log(-tl.log(1.0 - u))  # 1 - u lies in (0, 1]: log stays finite except at u = 0
        key = tl.where(valid & (p >= t), key, -float("inf"))
        k_max = tl.max(key, axis=0)
        k_idx = tl.argmax(key, axis=0) + start
        better = k_max > best_key
        best_idx = tl.where(better, k_idx, best_idx)
        best_key = tl.where(better, k_max, best_key)
    tl.store(out_ptr + row, best_idx.to(tl.int64))


def kernel(logits, top_p, BLOCK_V=4096, num_warps=8):
    logits = logits.contiguous()
    B, V = logits.shape
    out = torch.empty(B, dtype=torch.int64, device=logits.device)
    seed = torch.randint(0, 2**31 - 1, (1,), device=logits.device, dtype=torch.int64)
    _top_p_kernel[(B,)](logits, top_p.contiguous().float(), seed, out, V, logits.stride(0),
                        BLOCK_V=BLOCK_V, num_warps=num_warps)
    return out
