"""Seed: split-row top-p sampling in Triton. Every row is cut into chunks, one program per (row, chunk),
so all SMs work even at B=1; three passes over the logits find the exact nucleus, then one small
program per row draws the token.

The idea: cut on the logits, not on the probabilities. The nucleus is every token whose logit is at
least a threshold (p = exp(x - m) / s rises with x), so the cut can be searched on a fixed grid over
x whose cells mean the same thing in every chunk. A histogram of probability bits could not be shared:
a chunk knows only its own max, not the row's. The grid steps are 1/INV2 nats, a power of two, so
x * INV2 is exact and the levels nest: fine cell kf = floor(x * INV2), coarse cell kf >> LOG_R
(SUBCELLS fine cells per coarse cell; CELLS coarse cells span 16 nats). The kernels:

1. ``_chunk_stats`` (pass 1, grid chunks x rows): the chunk's max m_c, s_c = sum exp(x - m_c), and
   the mass (relative to m_c) of its top CELLS coarse cells. This is a one-hot accumulation, because
   Triton has no weighted histogram. Chunks combine as in an online softmax: scale by exp(m_c - m) and
   shift the cell indices by the chunk's top cell.
2. ``_refine`` (pass 2): every program rebuilds its row's coarse histogram from step 1 (the same result
   in every program). It finds the coarse cell where the mass counted from the top first reaches
   top_p * S (or finds the crossing below the 16-nat window), then sums the mass and the count
   (``tl.histogram``) of that cell's SUBCELLS fine cells in its own chunk. Tiles with no token in that
   cell skip this work.
3. ``_compact`` (pass 3): finds the fine cell where the mass crosses. Tokens above it are surely in.
   The tokens of that cell are the candidates: median ~6, mean ~90, 99th percentile ~1.1k per row at
   V = 128k (simulated on make_inputs). They are written in chunk order to a per-row buffer, at offsets
   taken from step 2's counts. There are no atomics, so every sum and the draw are deterministic. This
   pass also writes each tile's mass of sure-in tokens.
4. ``_finish`` (grid B; reads only the candidates and one tile): the exact cut among the candidates. A
   radix search over their 32-bit order-preserving keys, covering only the bits where those keys
   differ, finds the smallest key k* with (mass above the cell) + (candidate mass above k*) < top_p * S.
   Tied logits share a key (-0.0 included), so tied tokens are all in or all out, as the task's rule
   requires. Then inverse-CDF sampling, with one float64 uniform per row from ``torch.rand`` on the
   logits' device: choose the candidates or one tile by their masses, then the token inside it by a
   cumulative sum.
top_p >= 1 keeps every token. top_p <= 0 keeps the top tie group. If the cut falls below the 16-nat
window (top_p within (V - 1) e^-16 of 1, ~0.015 at V = 128k, on a peaked row), it stays exact, but most of
the row becomes candidates: slow, never wrong. On the H200 (2026-11-30) B=256 took 2.0-2.3 ms on input
draws holding such a row, 450-480 us on the others. A 32-nat window costs 14% at B=64 for every row, and
11-13% when only rows with top_p that near 1 take it (the slowest row sets _finish's time), so the seed
keeps 16. "Exact" means an exact cut for the fp32 masses the kernel sums. Those sums are off by ~1e-6 of
the row's mass at worst (one dominant token), as in every fp32 kernel; the task's rule allows 1e-5.
``nucleus_mask`` returns the nucleus the kernel sampled from, for tests.

Cost: 3 passes over the logits. Pass 1 loops over each chunk twice; the second loop should hit L1/L2.
There are no host syncs and the launches are fixed (torch.rand and four kernels), so the call can be
captured in a CUDA graph. Work per logit: ~3 * CELLS + ~20 operations in pass 1; ~3 * SUBCELLS + ~15
in pass 2, on the ~60% of tiles that hold a token of the crossing coarse cell; ~20 in pass 3.
Measured on the H200 (medians of CUDA-graph replays after the judge's L2 flush; docs/benchmarks.md and
docs/NOTES.md): B=64, V=129280: 134 us judged at the best config of its landscape (BLOCK 256, PROGRAMS
2048, 4 warps), 151 at the default; the passes are bound by instructions (ncu: 75 issued per logit in
_chunk_stats), which a third fewer instructions in the hot loops did not move (2026-11-30). B=1: 28-46 us.
The estimate written before any GPU ran it was 40-60 us at B=64.
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK": [512, 1024, 256], "PROGRAMS": [1024, 512, 2048], "CELLS": [16, 8], "SUBCELLS": [16, 32],
         "num_warps": [8, 16, 4]}
# The one-hot accumulators hold CELLS (or SUBCELLS) x BLOCK floats: at most 32 per thread. At 64 (e.g.
# BLOCK=1024, 8 warps) ptxas gives _refine 169 registers on sm_90: one block of 8 warps per SM.
CONSTRAINTS = ["CELLS * BLOCK <= 1024 * num_warps", "SUBCELLS * BLOCK <= 1024 * num_warps",
               "BLOCK >= 32 * num_warps"]  # no thread without a logit

_WINDOW_NATS = 16  # CELLS coarse cells cover this many nats below the row max
_RADIX_BITS = 4  # digits of the candidates' radix search in _finish
_CAND_BLOCK = 256  # candidates per iteration in _finish's streaming path
_CAND_CAP = 1024  # candidates _finish searches in registers
_FINISH_WARPS = 8  # 16 digits x 1024 candidates: 64 values a thread
_CLAMP = tl.constexpr(1073741824.0)  # 2**30: fine-cell indices stay far from int32 overflow


@triton.jit
def _cell(x, INV2: tl.constexpr):
    """Fine cell of x: floor(x * INV2), clamped (x = -inf lands at -2**30)."""
    return tl.floor(tl.minimum(tl.maximum(x * INV2, -_CLAMP), _CLAMP)).to(tl.int32)


@triton.jit
def _key(x):
    """Order-preserving key of an fp32 logit in [0, 2**32), as int64; -0.0 and +0.0 share one key."""
    b = tl.where(x == 0.0, 0, x.to(tl.int32, bitcast=True)).to(tl.int64)
    return tl.where(b < 0, -1 - b, b + 2147483648)


@triton.jit
def _classify(x, valid, c1, c1_lo, j2s, INV2: tl.constexpr, LOG_R: tl.constexpr, SUB: tl.constexpr):
    """(in the coarse crossing range, fine index inside it, surely in the nucleus, candidate)."""
    kf = _cell(x, INV2)
    k1 = kf >> LOG_R
    in1 = valid & (k1 <= c1) & (k1 >= c1_lo)
    ktop = c1 * SUB + (SUB - 1)  # top fine cell of the coarse crossing cell
    j2 = ktop - tl.maximum(kf, ktop - (SUB - 1))  # 0 at the top; everything lower piles into SUB - 1
    sure = valid & ((k1 > c1) | (in1 & (j2 < j2s)))
    cand = in1 & (j2 == j2s)
    return in1, j2, sure, cand


@triton.jit
def _chunk_stats(logits_ptr, stride, V, CHUNK, m_ptr, s_ptr, h1_ptr, S,
                 BLOCK: tl.constexpr, CELLS: tl.constexpr, LOG_R: tl.constexpr, INV2: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    base = logits_ptr + row.to(tl.int64) * stride
    start = c * CHUNK
    cols = tl.arange(0, BLOCK)
    mv = tl.full([BLOCK], -float("inf"), tl.float32)
    for off in range(0, CHUNK, BLOCK):
        idx = start + off + cols
        mv = tl.maximum(mv, tl.load(base + idx, mask=idx < V, other=-float("inf")))
    mc = tl.max(mv, axis=0)
    ref = tl.where(mc == -float("inf"), 0.0, mc)  # an all -inf chunk: p = 0, not NaN
    top = _cell(mc, INV2) >> LOG_R
    bins = tl.arange(0, CELLS)
    sv = tl.zeros([BLOCK], tl.float32)
    hv = tl.zeros([CELLS, BLOCK], tl.float32)
    for off in range(0, CHUNK, BLOCK):  # the same chunk again: from L1/L2
        idx = start + off + cols
        x = tl.load(base + idx, mask=idx < V, other=-float("inf"))
        p = tl.exp(x - ref)
        sv += p
        j = top - (_cell(x, INV2) >> LOG_R)  # coarse cells below the chunk's top one; >= CELLS: dropped
        hv += tl.where(j[None, :] == bins[:, None], p[None, :], 0.0)
    o = row * S + c
    tl.store(m_ptr + o, mc)
    tl.store(s_ptr + o, tl.sum(sv, axis=0))
    tl.store(h1_ptr + o * CELLS + bins, tl.sum(hv, axis=1))


@triton.jit
def _coarse_decision(row, m_ptr, s_ptr, h1_ptr, top_p_ptr, S, S_PAD: tl.constexpr, CELLS: tl.constexpr,
                     LOG_R: tl.constexpr, INV2: tl.constexpr, LOWEST: tl.constexpr):
    """The row's max m, target mass T, coarse crossing cell c1 (candidates: c1_lo <= cell <= c1; every
    higher cell is in) and A1, the mass of the cells above it. Identical in every program of a kernel."""
    cs = tl.arange(0, S_PAD)
    okc = cs < S
    mc = tl.load(m_ptr + row * S + cs, mask=okc, other=-float("inf"))
    sc = tl.load(s_ptr + row * S + cs, mask=okc, other=0.0)
    m = tl.max(mc, axis=0)
    scale = tl.where(mc == -float("inf"), 0.0, tl.exp(mc - m))
    total = tl.sum(scale * sc, axis=0)
    k1_top = _cell(m, INV2) >> LOG_R
    shift = k1_top - (_cell(mc, INV2) >> LOG_R)  # row cell = chunk cell + shift
    bins = tl.arange(0, CELLS)
    src = bins[None, :] - shift[:, None]
    ok = okc[:, None] & (src >= 0) & (src < CELLS)
    h = tl.load(h1_ptr + (row * S + cs)[:, None] * CELLS + src, mask=ok, other=0.0)
    h1 = tl.sum(h * scale[:, None], axis=0)
    tp = tl.load(top_p_ptr + row)
    # top_p <= 0 would keep nothing; a tiny positive target keeps the top tie group instead.
    target = tl.maximum(tp * total, 1e-30)
    cum = tl.cumsum(h1, axis=0)
    j1 = tl.min(tl.where(cum >= target, bins, CELLS), axis=0)  # CELLS: the crossing is below the window
    a1 = tl.sum(tl.where(bins == j1 - 1, cum, 0.0), axis=0)
    c1 = tl.where(tp >= 1.0, LOWEST, k1_top - j1)  # top_p >= 1: every cell lies above c1, all in
    c1_lo = tl.where(j1 < CELLS, c1, LOWEST)
    return m, target, a1, c1, c1_lo


@triton.jit
def _refine(logits_ptr, stride, V, CHUNK, m_ptr, s_ptr, h1_ptr, top_p_ptr, h2_ptr, n2_ptr, rsf_ptr, rsi_ptr,
            S, S_PAD: tl.constexpr, BLOCK: tl.constexpr, CELLS: tl.constexpr, SUB: tl.constexpr,
            LOG_R: tl.constexpr, INV2: tl.constexpr, LOWEST: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    m, target, a1, c1, c1_lo = _coarse_decision(row, m_ptr, s_ptr, h1_ptr, top_p_ptr, S, S_PAD, CELLS,
                                                LOG_R, INV2, LOWEST)
    if c == 0:  # the later kernels read this program's copy: one decision for everyone
        tl.store(rsf_ptr + row * 4, m)
        tl.store(rsf_ptr + row * 4 + 1, target)
        tl.store(rsf_ptr + row * 4 + 2, a1)
        tl.store(rsi_ptr + row * 4, c1)
        tl.store(rsi_ptr + row * 4 + 1, c1_lo)
    base = logits_ptr + row.to(tl.int64) * stride
    start = c * CHUNK
    cols = tl.arange(0, BLOCK)
    sub = tl.arange(0, SUB)
    hv = tl.zeros([SUB, BLOCK], tl.float32)
    nv = tl.zeros([SUB], tl.int32)
    for off in range(0, CHUNK, BLOCK):
        idx = start + off + cols
        valid = idx < V
        x = tl.load(base + idx, mask=valid, other=-float("inf"))
        in1, j2, sure, cand = _classify(x, valid, c1, c1_lo, SUB, INV2, LOG_R, SUB)
        if tl.max(in1.to(tl.int32), axis=0) > 0:
            j2 = tl.where(in1, j2, 0)
            p = tl.where(in1, tl.exp(x - m), 0.0)
            hv += tl.where(j2[None, :] == sub[:, None], p[None, :], 0.0)
            nv += tl.histogram(j2, SUB, mask=in1)
    o = (row * S + c) * SUB + sub
    tl.store(h2_ptr + o, tl.sum(hv, axis=1))
    tl.store(n2_ptr + o, nv)


@triton.jit
def _row_decision(rsf_ptr, rsi_ptr, row):
    """The coarse decision _refine wrote for ``row`` (4 fp32 and 4 int32 slots a row): the row max m, the
    target mass, and the candidates' coarse cells c1_lo <= cell <= c1."""
    m = tl.load(rsf_ptr + row * 4)
    target = tl.load(rsf_ptr + row * 4 + 1)
    c1 = tl.load(rsi_ptr + row * 4)
    c1_lo = tl.load(rsi_ptr + row * 4 + 1)
    return m, target, c1, c1_lo


@triton.jit
def _compact(logits_ptr, stride, V, CHUNK, h2_ptr, n2_ptr, rsf_ptr, rsi_ptr, bm_ptr, cx_ptr, ci_ptr, S, NT,
             S_PAD: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr, LOG_R: tl.constexpr,
             INV2: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    m, target, c1, c1_lo = _row_decision(rsf_ptr, rsi_ptr, row)
    a1 = tl.load(rsf_ptr + row * 4 + 2)
    cs = tl.arange(0, S_PAD)
    okc = cs < S
    sub = tl.arange(0, SUB)
    h2 = tl.sum(tl.load(h2_ptr + (row * S + cs)[:, None] * SUB + sub[None, :], mask=okc[:, None], other=0.0),
                axis=0)
    cum = a1 + tl.cumsum(h2, axis=0)
    j2s = tl.min(tl.where(cum >= target, sub, SUB), axis=0)  # SUB: no crossing, the whole range is in
    a2 = tl.where(j2s == 0, a1, tl.sum(tl.where(sub == j2s - 1, cum, 0.0), axis=0))
    if c == 0:
        tl.store(rsf_ptr + row * 4 + 3, a2)
        tl.store(rsi_ptr + row * 4 + 2, j2s)
    # Candidates go to the row's buffer in chunk order: this chunk's offset from pass 2's counts.
    counts = tl.load(n2_ptr + (row * S + cs) * SUB + tl.minimum(j2s, SUB - 1), mask=okc, other=0)
    counts = tl.where(j2s < SUB, counts, 0)
    run = tl.sum(tl.where(cs < c, counts, 0), axis=0)
    mine = tl.sum(tl.where(cs == c, counts, 0), axis=0)
    base = logits_ptr + row.to(tl.int64) * stride
    out_base = row.to(tl.int64) * V
    start = c * CHUNK
    cols = tl.arange(0, BLOCK)
    for off in range(0, CHUNK, BLOCK):
        idx = start + off + cols
        valid = idx < V
        x = tl.load(base + idx, mask=valid, other=-float("inf"))
        in1, j2, sure, cand = _classify(x, valid, c1, c1_lo, j2s, INV2, LOG_R, SUB)
        mass = tl.sum(tl.where(sure, tl.exp(x - m), 0.0), axis=0)
        tile = (start + off) // BLOCK
        tl.store(bm_ptr + row * NT + tile, mass, mask=tile < NT)
        if mine > 0:
            ci = cand.to(tl.int32)
            nc = tl.sum(ci, axis=0)
            if nc > 0:
                pos = run + tl.cumsum(ci, axis=0) - 1
                tl.store(cx_ptr + out_base + pos, x, mask=cand)
                tl.store(ci_ptr + out_base + pos, idx, mask=cand)
                run += nc


@triton.jit
def _radix_bounds(kmin, kmax, n, RB: tl.constexpr):
    """(levels, lowest key of the searched range, kmax) for a radix search of RB-bit digits over the bits
    where the candidates' keys [kmin, kmax] differ; all zero when there are no candidates."""
    kmin = tl.where(n > 0, kmin, 0)
    kmax = tl.where(n > 0, kmax, 0)
    nbits = tl.sum(((kmin ^ kmax) >> tl.arange(0, 64).to(tl.int64) != 0).to(tl.int32), axis=0)
    nlev = (nbits + RB - 1) // RB
    top = (nlev * RB).to(tl.int64)
    return nlev, (kmin >> top) << top, kmax


@triton.jit
def _sure_tile_token(logits_ptr, stride, V, row, bm, ts, r2, m, c1, c1_lo, j2s, NT_PAD: tl.constexpr,
                     BLOCK: tl.constexpr, SUB: tl.constexpr, LOG_R: tl.constexpr, INV2: tl.constexpr):
    """A sure-in token: a tile by the tiles' sure-in masses bm, then the token inside it by its share of
    the tile's mass; r2 is the draw's position in the sure-in mass."""
    cum_t = tl.cumsum(bm, axis=0)
    t = tl.min(tl.where((cum_t > r2) & (bm > 0), ts, NT_PAD), axis=0)
    t = tl.where(t < NT_PAD, t, tl.max(tl.where(bm > 0, ts, 0), axis=0))
    mt = tl.sum(tl.where(ts == t, bm, 0.0), axis=0)
    before = tl.sum(tl.where(ts < t, bm, 0.0), axis=0)
    frac = tl.minimum(tl.maximum((r2 - before) / mt, 0.0), 1.0)
    idx = t * BLOCK + tl.arange(0, BLOCK)
    valid = idx < V
    x = tl.load(logits_ptr + row.to(tl.int64) * stride + idx, mask=valid, other=-float("inf"))
    in1, j2, sure, cnd = _classify(x, valid, c1, c1_lo, j2s, INV2, LOG_R, SUB)
    w = tl.where(sure, tl.exp(x - m), 0.0).to(tl.float64)
    cum = tl.cumsum(w, axis=0)
    goal = frac * tl.sum(w, axis=0)
    first = tl.min(tl.where((cum > goal) & (w > 0), idx, 2147483647), axis=0)
    last = tl.max(tl.where(w > 0, idx, 0), axis=0)
    return tl.where(first < 2147483647, first, last)


@triton.jit
def _finish(logits_ptr, stride, V, n2_ptr, rsf_ptr, rsi_ptr, bm_ptr, cx_ptr, ci_ptr, u_ptr, out_ptr, S, NT,
            S_PAD: tl.constexpr, NT_PAD: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr,
            LOG_R: tl.constexpr, INV2: tl.constexpr, RB: tl.constexpr, BC: tl.constexpr, CAP: tl.constexpr):
    row = tl.program_id(0)
    m, target, c1, c1_lo = _row_decision(rsf_ptr, rsi_ptr, row)
    a2 = tl.load(rsf_ptr + row * 4 + 3)
    j2s = tl.load(rsi_ptr + row * 4 + 2)
    cs = tl.arange(0, S_PAD)
    n = tl.sum(tl.load(n2_ptr + (row * S + cs) * SUB + tl.minimum(j2s, SUB - 1), mask=cs < S, other=0), axis=0)
    n = tl.where(j2s < SUB, n, 0)
    cx = cx_ptr + row.to(tl.int64) * V
    ci = ci_ptr + row.to(tl.int64) * V
    ts = tl.arange(0, NT_PAD)
    bm = tl.load(bm_ptr + row * NT + ts, mask=ts < NT, other=0.0).to(tl.float64)
    u = tl.load(u_ptr + row)
    budget = target - a2
    # The radix search finds lo, the largest key whose candidate mass strictly above it is >= budget;
    # every candidate key above lo is in. Keys are 32-bit order-preserving, so tied logits share one.
    if n <= CAP:
        # The candidates (at most CAP: ~all rows of the task's inputs, 791 the most measured at B=64) are
        # read once and searched in registers. On the H200 (2026-11-30) that took this kernel from 23.0 to
        # 21.2 us at B=64, and 16 warps with int32 keys changed nothing more: the search is not what costs.
        q = tl.arange(0, CAP)
        ok = q < n
        x = tl.load(cx + q, mask=ok, other=-float("inf"))
        key = tl.where(ok, _key(x), -1)
        p = tl.where(ok, tl.exp(x - m), 0.0)
        nlev, lowbase, kmax = _radix_bounds(tl.min(tl.where(ok, key, 4294967296), axis=0), tl.max(key, axis=0),
                                            n, RB)
        lo = lowbase - 1
        digits = tl.arange(0, 2**RB).to(tl.int64)
        for lev in range(nlev):
            shift = ((nlev - 1 - lev) * RB).to(tl.int64)
            cand = tl.maximum(lo, lowbase) + (digits << shift)
            g = tl.sum(tl.where(key[None, :] > cand[:, None], p[None, :], 0.0), axis=1)
            lo = tl.maximum(lo, tl.max(tl.where(g >= budget, cand, lowbase - 1), axis=0))
        kstar = tl.minimum(lo + 1, kmax)  # every candidate key >= kstar is in (the top one at least)
        w = tl.where(ok & (key >= kstar), p, 0.0).to(tl.float64)
        m_cand = tl.sum(w, axis=0)
        r = u * (m_cand + tl.sum(bm, axis=0))  # u in [0, 1): inverse CDF over the nucleus
        if r < m_cand:  # a candidate: the first whose cumulative mass exceeds r
            cum = tl.cumsum(w, axis=0)
            first = tl.min(tl.where((cum > r) & (w > 0), q, 2147483647), axis=0)
            pick = tl.where(first < 2147483647, first, tl.max(tl.where(w > 0, q, 0), axis=0))
            token = tl.load(ci + pick)
        else:
            token = _sure_tile_token(logits_ptr, stride, V, row, bm, ts, r - m_cand, m, c1, c1_lo, j2s, NT_PAD,
                                     BLOCK, SUB, LOG_R, INV2)
    else:
        # More candidates than registers hold: the same search, streaming them from global memory.
        cols = tl.arange(0, BC)
        kmin = tl.full([], 4294967296, tl.int64)
        kmax = tl.full([], -1, tl.int64)
        for s0 in range(0, n, BC):
            ok = s0 + cols < n
            key = _key(tl.load(cx + s0 + cols, mask=ok, other=0.0))
            kmin = tl.minimum(kmin, tl.min(tl.where(ok, key, 4294967296), axis=0))
            kmax = tl.maximum(kmax, tl.max(tl.where(ok, key, -1), axis=0))
        nlev, lowbase, kmax = _radix_bounds(kmin, kmax, n, RB)
        lo = lowbase - 1
        digits = tl.arange(0, 2**RB).to(tl.int64)
        for lev in range(nlev):
            shift = ((nlev - 1 - lev) * RB).to(tl.int64)
            cand = tl.maximum(lo, lowbase) + (digits << shift)
            g = tl.zeros([2**RB, BC], tl.float32)
            for s0 in range(0, n, BC):
                ok = s0 + cols < n
                x = tl.load(cx + s0 + cols, mask=ok, other=-float("inf"))
                p = tl.where(ok, tl.exp(x - m), 0.0)
                g += tl.where(_key(x)[None, :] > cand[:, None], p[None, :], 0.0)
            lo = tl.maximum(lo, tl.max(tl.where(tl.sum(g, axis=1) >= budget, cand, lowbase - 1), axis=0))
        kstar = tl.minimum(lo + 1, kmax)
        m_cand = tl.zeros([], tl.float64)
        for s0 in range(0, n, BC):
            ok = s0 + cols < n
            x = tl.load(cx + s0 + cols, mask=ok, other=-float("inf"))
            m_cand += tl.sum(tl.where(ok & (_key(x) >= kstar), tl.exp(x - m), 0.0).to(tl.float64), axis=0)
        r = u * (m_cand + tl.sum(bm, axis=0))
        if r < m_cand:
            run = tl.zeros([], tl.float64)
            tok = tl.full([], -1, tl.int32)
            last = tl.full([], -1, tl.int32)
            for s0 in range(0, n, BC):
                ok = s0 + cols < n
                x = tl.load(cx + s0 + cols, mask=ok, other=-float("inf"))
                w = tl.where(ok & (_key(x) >= kstar), tl.exp(x - m), 0.0).to(tl.float64)
                cum = run + tl.cumsum(w, axis=0)
                first = tl.min(tl.where((cum > r) & (w > 0), s0 + cols, 2147483647), axis=0)
                tok = tl.where((tok < 0) & (first < 2147483647), first, tok)
                last = tl.maximum(last, tl.max(tl.where(w > 0, s0 + cols, -1), axis=0))
                run += tl.sum(w, axis=0)
            token = tl.load(ci + tl.maximum(tl.where(tok >= 0, tok, last), 0))
        else:
            token = _sure_tile_token(logits_ptr, stride, V, row, bm, ts, r - m_cand, m, c1, c1_lo, j2s, NT_PAD,
                                     BLOCK, SUB, LOG_R, INV2)
    tl.store(rsi_ptr + row * 4 + 3, (kstar - 2147483648).to(tl.int32))  # for nucleus_mask (tests)
    tl.store(out_ptr + row, token.to(tl.int64))


@triton.jit
def _membership(logits_ptr, stride, V, rsi_ptr, mask_ptr, BLOCK: tl.constexpr, SUB: tl.constexpr,
                LOG_R: tl.constexpr, INV2: tl.constexpr):
    """The nucleus the kernel sampled from, as a mask (nucleus_mask: for tests, never on the hot path)."""
    t = tl.program_id(0)
    row = tl.program_id(1)
    c1 = tl.load(rsi_ptr + row * 4)
    c1_lo = tl.load(rsi_ptr + row * 4 + 1)
    j2s = tl.load(rsi_ptr + row * 4 + 2)
    kstar = tl.load(rsi_ptr + row * 4 + 3).to(tl.int64) + 2147483648
    idx = t * BLOCK + tl.arange(0, BLOCK)
    valid = idx < V
    x = tl.load(logits_ptr + row.to(tl.int64) * stride + idx, mask=valid, other=-float("inf"))
    in1, j2, sure, cand = _classify(x, valid, c1, c1_lo, j2s, INV2, LOG_R, SUB)
    keep = sure | (cand & (_key(x) >= kstar))
    tl.store(mask_ptr + row.to(tl.int64) * V + idx, keep.to(tl.int8), mask=valid)


def _next_pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _geometry(B, V, BLOCK, PROGRAMS, CELLS, SUBCELLS):
    """Chunks of whole tiles, about PROGRAMS programs in all (the whole row in one at large B x V)."""
    tiles = triton.cdiv(V, BLOCK)
    per_chunk = triton.cdiv(tiles, min(max(1, triton.cdiv(PROGRAMS, B)), tiles))
    S = triton.cdiv(tiles, per_chunk)
    log_r = SUBCELLS.bit_length() - 1
    inv2 = float(SUBCELLS * CELLS // _WINDOW_NATS)  # fine cells per nat; coarse cells of 16/CELLS nats
    return tiles, S, per_chunk * BLOCK, log_r, inv2


def _run(logits, top_p, BLOCK, PROGRAMS, CELLS, SUBCELLS, num_warps):
    B, V = logits.shape
    dev = logits.device
    tiles, S, CHUNK, log_r, inv2 = _geometry(B, V, BLOCK, PROGRAMS, CELLS, SUBCELLS)
    lowest = -(2**30 >> log_r) - 1  # below every coarse cell
    # Workspaces, fresh per call (every word read is written earlier in the same call).
    f32 = torch.empty(B * (2 * S + S * CELLS + S * SUBCELLS + 4 + tiles + V), dtype=torch.float32, device=dev)
    i32 = torch.empty(B * (S * SUBCELLS + 4 + V), dtype=torch.int32, device=dev)
    ws_m, ws_s, ws_h1, ws_h2, rsf, bm, cx = f32.split(
        [B * S, B * S, B * S * CELLS, B * S * SUBCELLS, B * 4, B * tiles, B * V])
    n2, rsi, ci = i32.split([B * S * SUBCELLS, B * 4, B * V])
    u = torch.rand(B, dtype=torch.float64, device=dev)  # torch's RNG on the device: one uniform per row
    out = torch.empty(B, dtype=torch.int64, device=dev)

    common = dict(BLOCK=BLOCK, LOG_R=log_r, INV2=inv2, num_warps=num_warps)
    s_pad = _next_pow2(S)
    stride = logits.stride(0)
    _chunk_stats[(S, B)](logits, stride, V, CHUNK, ws_m, ws_s, ws_h1, S, CELLS=CELLS, **common)
    _refine[(S, B)](logits, stride, V, CHUNK, ws_m, ws_s, ws_h1, top_p, ws_h2, n2, rsf, rsi, S,
                    S_PAD=s_pad, CELLS=CELLS, SUB=SUBCELLS, LOWEST=lowest, **common)
    _compact[(S, B)](logits, stride, V, CHUNK, ws_h2, n2, rsf, rsi, bm, cx, ci, S, tiles,
                     S_PAD=s_pad, SUB=SUBCELLS, **common)
    _finish[(B,)](logits, stride, V, n2, rsf, rsi, bm, cx, ci, u, out, S, tiles, S_PAD=s_pad,
                  NT_PAD=_next_pow2(tiles), BLOCK=BLOCK, SUB=SUBCELLS, LOG_R=log_r, INV2=inv2, RB=_RADIX_BITS,
                  BC=_CAND_BLOCK, CAP=_CAND_CAP, num_warps=_FINISH_WARPS)
    return out, rsi


def kernel(logits, top_p, BLOCK=512, PROGRAMS=1024, CELLS=16, SUBCELLS=16, num_warps=8):
    logits = logits.contiguous()
    if logits.shape[0] == 0:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    return _run(logits, top_p.contiguous().float(), BLOCK, PROGRAMS, CELLS, SUBCELLS, num_warps)[0]


def nucleus_mask(logits, top_p, BLOCK=512, PROGRAMS=1024, CELLS=16, SUBCELLS=16, num_warps=8):
    """(tokens, mask [B, V] bool): one call of the kernel and the nucleus it drew each token from.
    For tests: it checks the exact cut, which single draws can only probe."""
    logits = logits.contiguous()
    B, V = logits.shape
    tokens, rsi = _run(logits, top_p.contiguous().float(), BLOCK, PROGRAMS, CELLS, SUBCELLS, num_warps)
    tiles, _, _, log_r, inv2 = _geometry(B, V, BLOCK, PROGRAMS, CELLS, SUBCELLS)
    mask = torch.empty(B, V, dtype=torch.int8, device=logits.device)
    _membership[(tiles, B)](logits, logits.stride(0), V, rsi, mask, BLOCK=BLOCK, SUB=SUBCELLS, LOG_R=log_r,
                            INV2=inv2, num_warps=num_warps)
    return tokens, mask.bool()
