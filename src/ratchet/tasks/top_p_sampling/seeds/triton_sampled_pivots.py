"""Seed: top-p sampling with pivots placed from a subsample of each row: one heavy pass over the logits.

The idea: the split-row seed finds the cut with two levels of 16-cell histograms on a fixed grid, and on
the H200 its passes are bound by instructions (ncu, 2026-11-30: 75 per logit in the first). A person who
knows where the cut roughly lies needs only a few exact sums around it. Every 64th logit of a row says
roughly where: sorted, with their masses scaled by 64, they estimate the crossing rank. Pivots set around
that estimate, and at fixed distances below the max for rows where a few tokens hold the mass, bracket the
cut; one pass sums the exact mass above each pivot; the tokens between the two pivots that straddle the
target are the only ones whose fate needs more work.

The kernels (S chunks per row, one program per (chunk, row) for the passes, one per row otherwise):
1. ``_chunk_max_sum``: each chunk's max and sum of exp(x - max) (the second loop reads the chunk from L1/L2).
2. ``_plan``: the row's max m and target T = top_p * sum; the subsample (every STRIDE-th logit) and its own
   crossing v, where its mass above v reaches top_p of its own total (a ratio estimate: the subsample's
   error in the total would swamp rows with top_p near 1), found by three rounds of a 16-way search (no
   sort: ``tl.sort`` of 2048 values took ~40 us per row on the H200); 11 pivots at v and v +- 0.03 x 3.2^k
   nats (k = 0 ... 4), and 5 at m - (0.5, 2, 8, 32, 104), sorted. Below m - 104 every exp is 0 in fp32, so
   those tokens are all in or all out.
3. ``_pivot_masses``: per chunk, the mass exp(x - m) of the logits >= each pivot. Two operations per pivot
   and logit: (x >= t) as a float, then a fused multiply-add.
4. ``_bracket``: the row's masses M_k (nondecreasing as the pivots fall: fp32 sums of supersets, in one
   order). With j the number of pivots whose mass is below T: logits >= pivot j-1 are surely in (their
   mass A = M_{j-1} < T), logits below pivot j are surely out (M_j >= T), the rest are candidates.
   top_p >= 1, or a cut below the last pivot, keeps every finite logit.
5. ``_compact``: the sure-in mass per lane (lane i sums the logits at start + t * BLOCK + i) and per chunk;
   the candidates appended to the row's buffer, at offsets from one atomic add per tile that holds any.
6. ``_finish``: the exact cut among the candidates, then the draw. The cut: a bisection over the
   candidates' 32-bit order-preserving keys for the smallest key v with A + mass(keys > v) < T, so tied
   logits are all in or all out; up to CAP candidates stay in registers, more are read again per step
   (slow, rare). The draw: a float64 uniform from ``torch.rand`` on the logits' device chooses between
   the candidates in and the sure-in tokens by their masses; among the candidates, an exponential race
   (argmin of -log(U) / p, U from Philox seeded by a second uniform and keyed by the token's index) picks
   one with probability p / their mass whatever order the atomics wrote them in; among the sure-in tokens,
   inverse CDF in the order (chunk, lane, tile). So a seed reproduces the draw, except where the
   candidates' fp32 mass, summed in the order the atomics wrote them, lands within its last bit of T.
"Exact" means exact for the fp32 masses the kernel sums, as in the split-row seed; the task allows 1e-5.
``nucleus_mask`` returns the nucleus the kernel sampled from, for tests.

Cost: three passes over the logits (1 and 5 light, 3 about 40 operations per logit) and six launches.
Measured on the H200 (2026-11-30, median CUDA-graph replay after the judge's L2 flush,
docs/results/2026-11-30-top-p-sampled-pivots.md): 270-285 us at B=64, V=129280 (split-row 135), 42-46 at
B=1 (41), 521-616 at B=256 (463). The estimate written before a GPU ran it was 50-60 us at B=64; the first
version (a sorted subsample, rank pivots) took 2.9 ms. What costs: the subsample's estimate is poor on the
task's rows, where a few hundred heavy tokens hold the mass and the subsample holds a handful of them, so on
a fifth of the rows the bracket holds 1k-8k candidates (at B=256 up to 127k), past the 1024 that
``_finish`` keeps in registers; the per-kernel profile at B=64 is ``_finish`` 89 us, ``_compact`` 43,
``_pivot_masses`` 29, pass 1 11, ``_plan`` 7. A second pass over the rows whose bracket is wide (what the
split-row seed's second histogram level does) is what it lacks; a denser subsample is not enough (every
8th logit still leaves 17% of rows over 1024 candidates, by a CPU replay of the bracket on task inputs).
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK": [256, 512, 128], "PROGRAMS": [1024, 2048, 512], "num_warps": [4, 8, 2]}
# _pivot_masses keeps 16 partial masses per logit of a tile: at most 32 registers per thread.
CONSTRAINTS = ["BLOCK <= 64 * num_warps", "BLOCK >= 32 * num_warps"]

_PIVOTS = 16
_STRIDE = 64  # the subsample: every 64th logit
_CAP = 1024  # candidates _finish keeps in registers for its bisection
_SLOW_BLOCK = 256  # candidates per iteration on the slow path


@triton.jit
def _key(x):
    """Order-preserving key of an fp32 logit in [0, 2**32), as int64; -0.0 and +0.0 share one key."""
    b = tl.where(x == 0.0, 0, x.to(tl.int32, bitcast=True)).to(tl.int64)
    return tl.where(b < 0, -1 - b, b + 2147483648)


@triton.jit
def _chunk_max_sum(logits_ptr, stride, V, CHUNK, m_ptr, s_ptr, S, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    base = logits_ptr + row.to(tl.int64) * stride
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, V)
    cols = tl.arange(0, BLOCK)
    mv = tl.full([BLOCK], -float("inf"), tl.float32)
    for off in range(start, end, BLOCK):
        mv = tl.maximum(mv, tl.load(base + off + cols, mask=off + cols < end, other=-float("inf"),
                                    eviction_policy="evict_last"))
    mc = tl.max(mv, axis=0)
    ref = tl.where(mc == -float("inf"), 0.0, mc)  # an all -inf chunk: p = 0, not NaN
    sv = tl.zeros([BLOCK], tl.float32)
    for off in range(start, end, BLOCK):  # the same chunk again: from L1/L2
        x = tl.load(base + off + cols, mask=off + cols < end, other=-float("inf"), eviction_policy="evict_last")
        sv += tl.exp(x - ref)
    tl.store(m_ptr + row * S + c, mc)
    tl.store(s_ptr + row * S + c, tl.sum(sv, axis=0))


@triton.jit
def _plan(logits_ptr, stride, V, m_ptr, s_ptr, top_p_ptr, piv_ptr, rs_ptr, S, S_PAD: tl.constexpr,
          NS_PAD: tl.constexpr, STRIDE: tl.constexpr, ROUNDS: tl.constexpr):
    row = tl.program_id(0)
    cs = tl.arange(0, S_PAD)
    mc = tl.load(m_ptr + row * S + cs, mask=cs < S, other=-float("inf"))
    sc = tl.load(s_ptr + row * S + cs, mask=cs < S, other=0.0)
    m = tl.max(mc, axis=0)
    total = tl.sum(tl.where(mc == -float("inf"), 0.0, tl.exp(mc - m)) * sc, axis=0)
    tp = tl.load(top_p_ptr + row)
    target = tl.maximum(tp * total, 1e-30)  # top_p <= 0 keeps the top tie group
    # The subsample's own crossing: the value v where its mass above v reaches top_p of its own total (a
    # ratio estimate: the subsample's error in the total would swamp rows whose top_p is near 1).
    j = tl.arange(0, NS_PAD)
    ns = (V + STRIDE - 1) // STRIDE
    xs = tl.load(logits_ptr + row.to(tl.int64) * stride + j * STRIDE, mask=j < ns, other=-float("inf"))
    e = tl.exp(xs - m)
    sub_target = tl.maximum(tp * tl.sum(e, axis=0), 1e-30)
    # A 16-way search (no sort: tl.sort of 2048 values took ~40 us per row on the H200): the subsample's
    # mass above 16 evenly spaced values narrows [lo, hi) to a 17th per round.
    i = tl.arange(0, 16)
    lo = m - 104.0
    hi = m + 1.0
    for _ in tl.static_range(ROUNDS):
        t = lo + (hi - lo) * (i + 1).to(tl.float32) / 17.0
        above = tl.sum(tl.where(xs[None, :] >= t[:, None], e[None, :], 0.0), axis=1)
        k = tl.sum((above >= sub_target).to(tl.int32), axis=0)  # a prefix of t: the mass falls as t rises
        new_lo = tl.sum(tl.where(i == k - 1, t, 0.0), axis=0)
        new_hi = tl.sum(tl.where(i == k, t, 0.0), axis=0)
        lo, hi = tl.where(k > 0, new_lo, lo), tl.where(k < 16, new_hi, hi)
    v = 0.5 * (lo + hi)
    # Pivots: the estimate, 5 on each side at 0.03 ... 3.1 nats (the subsample's error is a fraction of a
    # nat where tokens are dense, more where they are sparse), and 5 below the max for rows where a few
    # tokens hold the mass. Below m - 104 every exp is 0 in fp32: those tokens are all in or all out.
    d = 0.03 * tl.exp2(1.678 * tl.where(i < 5, i, i - 6).to(tl.float32))  # 0.03 x 3.2^k, k = 0 ... 4
    far = m - tl.where(i == 15, 104.0, 0.5 * tl.exp2(2.0 * (i - 11).to(tl.float32)))  # m - 0.5, 2, 8, 32, 104
    piv = tl.sort(tl.where(i < 5, v + d, tl.where(i == 5, v, tl.where(i < 11, v - d, far))), descending=True)
    tl.store(piv_ptr + row * 16 + i, piv)
    tl.store(rs_ptr + row * 8, m)
    tl.store(rs_ptr + row * 8 + 1, target)
    tl.store(rs_ptr + row * 8 + 2, tp)


@triton.jit
def _pivot_masses(logits_ptr, stride, V, CHUNK, piv_ptr, rs_ptr, pm_ptr, S, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    piv = tl.load(piv_ptr + row * 16 + tl.arange(0, 16))
    m = tl.load(rs_ptr + row * 8)
    base = logits_ptr + row.to(tl.int64) * stride
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, V)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([16, BLOCK], tl.float32)
    for off in range(start, end, BLOCK):
        x = tl.load(base + off + cols, mask=off + cols < end, other=-float("inf"), eviction_policy="evict_last")
        acc += (x[None, :] >= piv[:, None]).to(tl.float32) * tl.exp(x - m)[None, :]
    tl.store(pm_ptr + (row * S + c) * 16 + tl.arange(0, 16), tl.sum(acc, axis=1))


@triton.jit
def _bracket(pm_ptr, piv_ptr, rs_ptr, cnt_ptr, S, S_PAD: tl.constexpr):
    row = tl.program_id(0)
    cs = tl.arange(0, S_PAD)
    k = tl.arange(0, 16)
    mass = tl.sum(tl.load(pm_ptr + (row * S + cs)[:, None] * 16 + k[None, :], mask=(cs < S)[:, None], other=0.0),
                  axis=0)
    piv = tl.load(piv_ptr + row * 16 + k)
    target = tl.load(rs_ptr + row * 8 + 1)
    tp = tl.load(rs_ptr + row * 8 + 2)
    jc = tl.sum((mass < target).to(tl.int32), axis=0)  # a prefix of the pivots: M rises as they fall
    hi = tl.sum(tl.where(k == jc - 1, piv, 0.0), axis=0)
    a = tl.sum(tl.where(k == jc - 1, mass, 0.0), axis=0)
    lo = tl.sum(tl.where(k == jc, piv, 0.0), axis=0)
    hi = tl.where(jc == 0, float("inf"), hi)  # no pivot below the target: the highest bounds the candidates
    everything = (jc == 16) | (tp >= 1.0)  # every finite logit is in: sure above the lowest float
    hi = tl.where(everything, -3.4028234663852886e38, hi)
    lo = tl.where(everything, hi, lo)
    tl.store(rs_ptr + row * 8 + 3, hi)
    tl.store(rs_ptr + row * 8 + 4, lo)
    tl.store(rs_ptr + row * 8 + 5, a)
    tl.store(cnt_ptr + row, 0)  # _compact's atomic counter, zeroed here instead of by a memset launch


@triton.jit
def _compact(logits_ptr, stride, V, CHUNK, rs_ptr, lm_ptr, cm_ptr, cnt_ptr, cx_ptr, ci_ptr, S, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    m = tl.load(rs_ptr + row * 8)
    hi = tl.load(rs_ptr + row * 8 + 3)
    lo = tl.load(rs_ptr + row * 8 + 4)
    base = logits_ptr + row.to(tl.int64) * stride
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, V)
    cols = tl.arange(0, BLOCK)
    out_base = row.to(tl.int64) * V
    sv = tl.zeros([BLOCK], tl.float32)
    for off in range(start, end, BLOCK):
        idx = off + cols
        valid = idx < end
        x = tl.load(base + idx, mask=valid, other=-float("inf"), eviction_policy="evict_first")
        sv += tl.where(x >= hi, tl.exp(x - m), 0.0)
        cand = valid & (x >= lo) & (x < hi)
        n = tl.sum(cand.to(tl.int32), axis=0)
        if n > 0:
            pos = tl.atomic_add(cnt_ptr + row, n) + tl.cumsum(cand.to(tl.int32), axis=0) - 1
            tl.store(cx_ptr + out_base + pos, x, mask=cand)
            tl.store(ci_ptr + out_base + pos, idx, mask=cand)
    tl.store(lm_ptr + (row * S + c) * BLOCK + cols, sv)
    tl.store(cm_ptr + row * S + c, tl.sum(sv, axis=0))


@triton.jit
def _pick(w, r, N: tl.constexpr):
    """The first index whose cumulative weight exceeds r, among those with weight > 0; the last of those
    when rounding leaves r at or past the total (the weights and r come from different fp sums)."""
    i = tl.arange(0, N)
    cum = tl.cumsum(w, axis=0)
    first = tl.min(tl.where((cum > r) & (w > 0), i, N), axis=0)
    return tl.where(first < N, first, tl.max(tl.where(w > 0, i, 0), axis=0))


@triton.jit
def _race(seed, idx, w):
    """Exponential race keys: argmin over -log(U) / w picks index i with probability w_i / sum(w), with U
    from Philox keyed by the token index, so the draw does not depend on the order the atomics wrote the
    candidates in. Zero weights never win."""
    race = -tl.log(tl.rand(seed, idx)) / tl.where(w > 0, w, 1.0)
    return tl.where(w > 0, race, float("inf"))


@triton.jit
def _pick_sure(base, V, CHUNK, lm_ptr, row, S, cm, r, m, hi, S_PAD: tl.constexpr, TPC_PAD: tl.constexpr,
               BLOCK: tl.constexpr):
    """A sure-in logit by inverse CDF in the order (chunk, lane, tile), from the per-chunk and per-lane
    masses _compact wrote, then the tile's logits along the chosen lane."""
    cs = tl.arange(0, S_PAD)
    ch = _pick(cm, r, S_PAD)
    r = r - tl.sum(tl.where(cs < ch, cm, 0.0), axis=0)
    lanes = tl.arange(0, BLOCK)
    lm = tl.load(lm_ptr + (row * S + ch) * BLOCK + lanes).to(tl.float64)
    lane = _pick(lm, r, BLOCK)
    r = r - tl.sum(tl.where(lanes < lane, lm, 0.0), axis=0)
    t = tl.arange(0, TPC_PAD)
    idx = ch * CHUNK + t * BLOCK + lane
    valid = (t * BLOCK < CHUNK) & (idx < V)
    x = tl.load(base + idx, mask=valid, other=-float("inf"))
    w = tl.where(valid & (x >= hi), tl.exp(x - m), 0.0).to(tl.float64)
    return tl.sum(tl.where(t == _pick(w, r, TPC_PAD), idx, 0), axis=0)


@triton.jit
def _finish(logits_ptr, stride, V, CHUNK, rs_ptr, lm_ptr, cm_ptr, cnt_ptr, cx_ptr, ci_ptr, ks_ptr, u_ptr,
            out_ptr, S, S_PAD: tl.constexpr, TPC_PAD: tl.constexpr, BLOCK: tl.constexpr, CAP: tl.constexpr,
            SB: tl.constexpr):
    row = tl.program_id(0)
    m = tl.load(rs_ptr + row * 8)
    target = tl.load(rs_ptr + row * 8 + 1)
    hi = tl.load(rs_ptr + row * 8 + 3)
    a = tl.load(rs_ptr + row * 8 + 5)
    n = tl.load(cnt_ptr + row)
    cx = cx_ptr + row.to(tl.int64) * V
    ci = ci_ptr + row.to(tl.int64) * V
    base = logits_ptr + row.to(tl.int64) * stride
    cs = tl.arange(0, S_PAD)
    cm = tl.load(cm_ptr + row * S + cs, mask=cs < S, other=0.0).to(tl.float64)
    u = tl.load(u_ptr + row * 2)  # chooses between the candidates and the sure tokens
    seed = (tl.load(u_ptr + row * 2 + 1) * 2147483647.0).to(tl.int32)  # the race's Philox seed
    if n <= CAP:  # the candidates stay in registers for the whole search
        q = tl.arange(0, CAP)
        ok = q < n
        x = tl.load(cx + q, mask=ok, other=-float("inf"))
        key = tl.where(ok, _key(x), -1)
        p = tl.where(ok, tl.exp(x - m), 0.0)
        lo_k = tl.full([], -1, tl.int64)
        hi_k = tl.full([], 4294967295, tl.int64)
        while hi_k - lo_k > 1:  # the smallest key v with A + mass(key > v) < T: 32 halvings at most
            mid = (lo_k + hi_k) // 2
            if a + tl.sum(tl.where(key > mid, p, 0.0), axis=0) < target:
                hi_k = mid
            else:
                lo_k = mid
        w = tl.where(key >= hi_k, p, 0.0)
        cand_mass = tl.sum(w.to(tl.float64), axis=0)
        r = u * (cand_mass + tl.sum(cm, axis=0))
        idx = tl.load(ci + q, mask=ok, other=0)
        pick = tl.argmin(_race(seed, idx, w), axis=0)
        if r < cand_mass:
            token = tl.sum(tl.where(q == pick, idx, 0), axis=0)
        else:
            token = _pick_sure(base, V, CHUNK, lm_ptr, row, S, cm, r - cand_mass, m, hi, S_PAD, TPC_PAD, BLOCK)
    else:
        # The same search and race with the candidates read again from the buffer per step (slow; rare).
        cols = tl.arange(0, SB)
        lo_k = tl.full([], -1, tl.int64)
        hi_k = tl.full([], 4294967295, tl.int64)
        while hi_k - lo_k > 1:
            mid = (lo_k + hi_k) // 2
            above = tl.zeros([SB], tl.float32)
            for s0 in range(0, n, SB):
                x = tl.load(cx + s0 + cols, mask=s0 + cols < n, other=-float("inf"))
                above += tl.where(_key(x) > mid, tl.exp(x - m), 0.0)
            if a + tl.sum(above, axis=0) < target:
                hi_k = mid
            else:
                lo_k = mid
        wsum = tl.zeros([SB], tl.float64)
        best = tl.full([SB], float("inf"), tl.float32)
        best_at = tl.zeros([SB], tl.int32)
        for s0 in range(0, n, SB):
            ok = s0 + cols < n
            x = tl.load(cx + s0 + cols, mask=ok, other=-float("inf"))
            w = tl.where(_key(x) >= hi_k, tl.exp(x - m), 0.0)
            wsum += w.to(tl.float64)
            race = _race(seed, tl.load(ci + s0 + cols, mask=ok, other=0), w)
            better = race < best
            best = tl.where(better, race, best)
            best_at = tl.where(better, s0 + cols, best_at)
        cand_mass = tl.sum(wsum, axis=0)
        r = u * (cand_mass + tl.sum(cm, axis=0))
        if r < cand_mass:
            token = tl.load(ci + tl.sum(tl.where(cols == tl.argmin(best, axis=0), best_at, 0), axis=0))
        else:
            token = _pick_sure(base, V, CHUNK, lm_ptr, row, S, cm, r - cand_mass, m, hi, S_PAD, TPC_PAD, BLOCK)
    tl.store(ks_ptr + row, hi_k)
    tl.store(out_ptr + row, token.to(tl.int64))


@triton.jit
def _membership(logits_ptr, stride, V, rs_ptr, ks_ptr, mask_ptr, BLOCK: tl.constexpr):
    """The nucleus the kernel sampled from, as a mask (nucleus_mask: for tests, never on the hot path)."""
    t = tl.program_id(0)
    row = tl.program_id(1)
    hi = tl.load(rs_ptr + row * 8 + 3)
    lo = tl.load(rs_ptr + row * 8 + 4)
    kin = tl.load(ks_ptr + row)
    idx = t * BLOCK + tl.arange(0, BLOCK)
    valid = idx < V
    x = tl.load(logits_ptr + row.to(tl.int64) * stride + idx, mask=valid, other=-float("inf"))
    keep = valid & ((x >= hi) | ((x >= lo) & (x < hi) & (_key(x) >= kin)))
    tl.store(mask_ptr + row.to(tl.int64) * V + idx, keep.to(tl.int8), mask=valid)


def _next_pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _geometry(B, V, BLOCK, PROGRAMS):
    """Chunks of whole tiles, about PROGRAMS programs in all (the whole row in one at large B x V)."""
    tiles = triton.cdiv(V, BLOCK)
    per_chunk = triton.cdiv(tiles, min(max(1, triton.cdiv(PROGRAMS, B)), tiles))
    return tiles, triton.cdiv(tiles, per_chunk), per_chunk


def _run(logits, top_p, BLOCK, PROGRAMS, num_warps):
    B, V = logits.shape
    dev = logits.device
    tiles, S, per_chunk = _geometry(B, V, BLOCK, PROGRAMS)
    CHUNK = per_chunk * BLOCK
    # Workspaces, fresh per call (every word read is written earlier in the same call).
    f32 = torch.empty(B * (S * (3 + _PIVOTS + BLOCK) + _PIVOTS + 8 + V), dtype=torch.float32, device=dev)
    ws_m, ws_s, pm, lm, cm, piv, rs, cx = f32.split(
        [B * S, B * S, B * S * _PIVOTS, B * S * BLOCK, B * S, B * _PIVOTS, B * 8, B * V])
    i32 = torch.empty(B * (1 + V), dtype=torch.int32, device=dev)
    cnt, ci = i32.split([B, B * V])
    ks = torch.empty(B, dtype=torch.int64, device=dev)
    u = torch.rand(B, 2, dtype=torch.float64, device=dev)  # torch's RNG on the device: two per row
    out = torch.empty(B, dtype=torch.int64, device=dev)
    s_pad = _next_pow2(S)
    stride = logits.stride(0)
    _chunk_max_sum[(S, B)](logits, stride, V, CHUNK, ws_m, ws_s, S, BLOCK=BLOCK, num_warps=num_warps)
    _plan[(B,)](logits, stride, V, ws_m, ws_s, top_p, piv, rs, S, S_PAD=s_pad,
                NS_PAD=_next_pow2(triton.cdiv(V, _STRIDE)), STRIDE=_STRIDE, ROUNDS=3, num_warps=8)
    _pivot_masses[(S, B)](logits, stride, V, CHUNK, piv, rs, pm, S, BLOCK=BLOCK, num_warps=num_warps)
    _bracket[(B,)](pm, piv, rs, cnt, S, S_PAD=s_pad, num_warps=1)
    _compact[(S, B)](logits, stride, V, CHUNK, rs, lm, cm, cnt, cx, ci, S, BLOCK=BLOCK, num_warps=num_warps)
    _finish[(B,)](logits, stride, V, CHUNK, rs, lm, cm, cnt, cx, ci, ks, u, out, S, S_PAD=s_pad,
                  TPC_PAD=_next_pow2(per_chunk), BLOCK=BLOCK, CAP=_CAP, SB=_SLOW_BLOCK, num_warps=4)
    return out, rs, ks


def kernel(logits, top_p, BLOCK=256, PROGRAMS=1024, num_warps=4):
    logits = logits.contiguous()
    if logits.shape[0] == 0:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    return _run(logits, top_p.contiguous().float(), BLOCK, PROGRAMS, num_warps)[0]


def nucleus_mask(logits, top_p, BLOCK=256, PROGRAMS=1024, num_warps=4):
    """(tokens, mask [B, V] bool): one call of the kernel and the nucleus it drew each token from.
    For tests: it checks the exact cut, which single draws can only probe."""
    logits = logits.contiguous()
    B, V = logits.shape
    tokens, rs, ks = _run(logits, top_p.contiguous().float(), BLOCK, PROGRAMS, num_warps)
    mask = torch.empty(B, V, dtype=torch.int8, device=logits.device)
    _membership[(triton.cdiv(V, BLOCK), B)](logits, logits.stride(0), V, rs, ks, mask, BLOCK=BLOCK,
                                            num_warps=num_warps)
    return tokens, mask.bool()
