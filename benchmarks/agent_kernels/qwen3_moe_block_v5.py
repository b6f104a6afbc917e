"""Sparse MoE block (Qwen3-MoE style) for decode. v5: the one-token path in 2 launches, v4's multi-token path.

Why v4 sat at ~45% of the copy rate at one token (56.9 us vs a 25.3 us byte floor): 6-7 launches in a chain
(cuBLAS gemv router, softmax, topk, gate_up, down), each with its own ramp-up and drain, and the 25 MB down
phase in a kernel of only 256 CTAs behind a full grid-wide dependency on the 50 MB gate_up kernel.

v5, 1 token (T == 1), 2 launches, no torch op between them:
  R router: grid cdiv(E, RB): each program RB logits (fp32 dot, rounded to the input dtype as the module's
    F.linear output), then the last program to arrive (atomic ticket, no waiting) does softmax in fp32,
    top-8 by rank on the bf16 logits (ties: lowest index first, torch's gatherTopK rule; the probabilities
    are monotone in the logits, equal logits give equal probabilities), and the module's renormalisation
    w_k = bf16(p_k / sum_top p). RTORCH=1 uses torch's own router ops instead (fallback knob).
  X experts, fused gate_up -> down with split-K over the intermediate dim: grid (8 slots, I/BN). A program
    computes h = w_k * silu(x.Wg[e,n]) * (x.Wu[e,n]) for its BN rows n, then immediately multiplies it into
    Wd[e, :, n-block] (all HD rows, BN columns) and atomically adds the HD partial sums into an fp32 scratch
    accumulator. The last program to arrive converts the accumulator to the output dtype, re-zeroes it and
    resets its ticket (self-cleaning scratch kept between calls; nothing waits, so no deadlock, and the
    interpreter runs it in program order). Every program streams 3*BN*HD weights (384 KB at BN=32):
    192 CTAs all resident at once, each reading contiguous rows; no grid-wide phase boundary.
2+ tokens: v4's path unchanged (torch router, tensor-core head programs, combine).
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

TOPK = 8
SPACE = {"BN": [32, 16, 64], "BK": [256, 512, 128], "BH": [256, 512, 128], "NW": [8, 4, 16],
         "RB": [8, 4, 16], "RTORCH": [0, 1]}
CONSTRAINTS = ["BN * BK <= 16384", "BH * BN <= 16384"]

_SCRATCH = {}


def _scratch(dev, E, HD):
    key = (str(dev), E, HD)
    s = _SCRATCH.get(key)
    if s is None:
        s = {"lg": torch.zeros(E, device=dev, dtype=torch.float32),
             "cnt": torch.zeros(2, device=dev, dtype=torch.int32),      # [router ticket, experts ticket]
             "ids": torch.zeros(TOPK, device=dev, dtype=torch.int32),
             "rw": torch.zeros(TOPK, device=dev, dtype=torch.float32),
             "acc": torch.zeros(HD, device=dev, dtype=torch.float32)}   # zero between calls
        _SCRATCH[key] = s
    return s


@triton.jit
def _router1_kernel(x_ptr, gw_ptr, lg_ptr, cnt_ptr, ids_ptr, rw_ptr, E, HD, NPROG,
                    RB: tl.constexpr, BKR: tl.constexpr, EP: tl.constexpr, K: tl.constexpr):
    """T == 1: logits of RB experts; the last program picks the top K and their renormalised weights."""
    pid = tl.program_id(0)
    re = pid * RB + tl.arange(0, RB)
    rm = re < E
    ak = tl.arange(0, BKR)
    acc = tl.zeros([RB], tl.float32)
    for k0 in range(0, HD, BKR):
        kk = k0 + ak
        km = kk < HD
        w = tl.load(gw_ptr + re[:, None].to(tl.int64) * HD + kk[None, :], mask=rm[:, None] & km[None, :],
                    other=0.0)
        xv = tl.load(x_ptr + kk, mask=km, other=0.0).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * xv[None, :], axis=1)
    lg = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(lg_ptr + re, lg, mask=rm)
    tl.debug_barrier()
    c = tl.atomic_add(cnt_ptr, 1, sem="acq_rel")
    if c == NPROG - 1:
        offs = tl.arange(0, EP)
        om = offs < E
        l = tl.load(lg_ptr + offs, mask=om, other=float("-inf"), cache_modifier=".cg")
        m = tl.max(l, axis=0)
        ex = tl.where(om, tl.exp(l - m), 0.0)
        p = ex / tl.sum(ex, axis=0)
        # rank_i = #experts ahead of i (greater logit, or equal logit and lower index)
        lj = l[None, :]
        li = l[:, None]
        ahead = ((lj > li) | ((lj == li) & (offs[None, :] < offs[:, None]))) & om[None, :]
        rank = tl.sum(ahead.to(tl.int32), axis=1)
        sel = (rank < K) & om
        tot = tl.sum(tl.where(sel, p, 0.0), axis=0)
        wv = (p / tot).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(ids_ptr + rank, offs, mask=sel)
        tl.store(rw_ptr + rank, wv, mask=sel)
        tl.store(cnt_ptr, 0)


@triton.jit
def _moe1_kernel(x_ptr, w1_ptr, w2_ptr, ids_ptr, rw_ptr, acc_ptr, cnt_ptr, out_ptr, HD, I, NPROG,
                 BN: tl.constexpr, BK: tl.constexpr, BH: tl.constexpr):
    """T == 1: slot k, intermediate rows n0..n0+BN: gate_up, silu*up, routing weight, then the down
    projection of those BN columns for all HD outputs, atomically added; the last program writes out."""
    k = tl.program_id(0)
    nb = tl.program_id(1)
    e = tl.load(ids_ptr + k).to(tl.int64)
    wk = tl.load(rw_ptr + k)
    an = nb * BN + tl.arange(0, BN)
    nmask = an < I
    ak = tl.arange(0, BK)
    gp = w1_ptr + e * (2 * I) * HD + an[:, None].to(tl.int64) * HD
    up = gp + I * HD
    g = tl.zeros([BN], tl.float32)
    u = tl.zeros([BN], tl.float32)
    for k0 in range(0, HD, BK):
        kk = k0 + ak
        km = kk < HD
        wm = nmask[:, None] & km[None, :]
        wg = tl.load(gp + kk[None, :], mask=wm, other=0.0, eviction_policy="evict_first")
        wu = tl.load(up + kk[None, :], mask=wm, other=0.0, eviction_policy="evict_first")
        xv = tl.load(x_ptr + kk, mask=km, other=0.0).to(tl.float32)
        g += tl.sum(wg.to(tl.float32) * xv[None, :], axis=1)
        u += tl.sum(wu.to(tl.float32) * xv[None, :], axis=1)
    hv = tl.where(nmask, g / (1.0 + tl.exp(-g)) * u * wk, 0.0)
    ah0 = tl.arange(0, BH)
    dp = w2_ptr + e * HD * I + an[None, :]
    for h0 in range(0, HD, BH):
        ah = h0 + ah0
        hm = ah < HD
        wd = tl.load(dp + ah[:, None].to(tl.int64) * I, mask=hm[:, None] & nmask[None, :], other=0.0,
                     eviction_policy="evict_first")
        part = tl.sum(wd.to(tl.float32) * hv[None, :], axis=1)
        tl.atomic_add(acc_ptr + ah, part, mask=hm, sem="relaxed")
    tl.debug_barrier()
    c = tl.atomic_add(cnt_ptr, 1, sem="acq_rel")
    if c == NPROG - 1:
        for h0 in range(0, HD, BH):
            ah = h0 + ah0
            hm = ah < HD
            v = tl.load(acc_ptr + ah, mask=hm, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + ah, v.to(out_ptr.dtype.element_ty), mask=hm)
            tl.store(acc_ptr + ah, tl.zeros([BH], tl.float32), mask=hm)
        tl.store(cnt_ptr, 0)


@triton.jit
def _prelude(idx_ptr, a, P, PP: tl.constexpr):
    """Expert e of pair a; c = number of pairs routed to e if a is the first of them, else 0."""
    offs = tl.arange(0, PP)
    pm = offs < P
    ids = tl.load(idx_ptr + offs, mask=pm, other=-1)
    e = tl.load(idx_ptr + a)
    match = (ids == e) & pm
    first = tl.min(tl.where(match, offs, PP), axis=0)
    cnt = tl.sum(match.to(tl.int32), axis=0)
    c = tl.where(first == a, cnt, 0)
    return e, c, match, offs


@triton.jit
def _next_pairs(match, offs, prev, BM: tl.constexpr, PP: tl.constexpr):
    """The next BM pairs (index order) after pair `prev` that match; PP where none is left."""
    am = tl.arange(0, BM)
    q = tl.full([BM], PP, tl.int32)
    for j in tl.static_range(BM):
        nxt = tl.min(tl.where(match & (offs > prev), offs, PP), axis=0)
        q = tl.where(am == j, nxt, q)
        prev = nxt
    return q, prev



@triton.jit
def _gate_up_dot_kernel(x_ptr, w1_ptr, idx_ptr, h_ptr, P, HD, I,
                        K: tl.constexpr, PP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """T > 1: 16-token tiles on the tensor cores; operands upcast to fp32 (bf16 values are exact in tf32)."""
    BM: tl.constexpr = 16
    a = tl.program_id(0)
    nb = tl.program_id(1)
    e, c, match, offs = _prelude(idx_ptr, a, P, PP)
    an = nb * BN + tl.arange(0, BN)
    nmask = an < I
    ak = tl.arange(0, BK)
    wbase = w1_ptr + e.to(tl.int64) * (2 * I) * HD
    prev = a * 0 - 1
    for _m0 in range(0, c, BM):
        q, prev = _next_pairs(match, offs, prev, BM, PP)
        rmask = q < P
        tok = q // K
        acc_g = tl.zeros([BM, BN], tl.float32)
        acc_u = tl.zeros([BM, BN], tl.float32)
        for k0 in range(0, HD, BK):
            kk = k0 + ak
            km = kk < HD
            xv = tl.load(x_ptr + tok[:, None] * HD + kk[None, :], mask=rmask[:, None] & km[None, :],
                         other=0.0).to(tl.float32)
            wm = km[:, None] & nmask[None, :]
            wg = tl.load(wbase + an[None, :] * HD + kk[:, None], mask=wm, other=0.0).to(tl.float32)
            wu = tl.load(wbase + (an[None, :] + I) * HD + kk[:, None], mask=wm, other=0.0).to(tl.float32)
            acc_g = tl.dot(xv, wg, acc_g, input_precision="tf32")
            acc_u = tl.dot(xv, wu, acc_u, input_precision="tf32")
        hv = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
        tl.store(h_ptr + q[:, None] * I + an[None, :], hv, mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _down_dot_kernel(h_ptr, w2_ptr, idx_ptr, rw_ptr, y_ptr, P, HD, I,
                     PP: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr):
    BM: tl.constexpr = 16
    a = tl.program_id(0)
    hb = tl.program_id(1)
    e, c, match, offs = _prelude(idx_ptr, a, P, PP)
    ah = hb * BH + tl.arange(0, BH)
    hmask = ah < HD
    ak = tl.arange(0, BK)
    wbase = w2_ptr + e.to(tl.int64) * HD * I
    prev = a * 0 - 1
    for _m0 in range(0, c, BM):
        q, prev = _next_pairs(match, offs, prev, BM, PP)
        rmask = q < P
        rw = tl.load(rw_ptr + q, mask=rmask, other=0.0).to(tl.float32)
        acc = tl.zeros([BM, BH], tl.float32)
        for k0 in range(0, I, BK):
            kk = k0 + ak
            km = kk < I
            hv = tl.load(h_ptr + q[:, None] * I + kk[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
            wd = tl.load(wbase + ah[None, :] * I + kk[:, None], mask=km[:, None] & hmask[None, :],
                         other=0.0).to(tl.float32)
            acc = tl.dot(hv, wd, acc, input_precision="tf32")
        yv = acc * rw[:, None]
        tl.store(y_ptr + q[:, None] * HD + ah[None, :], yv, mask=rmask[:, None] & hmask[None, :])


@triton.jit
def _combine_kernel(y_ptr, out_ptr, HD, K: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK + tl.arange(0, BLOCK)
    m = cols < HD
    acc = tl.zeros([BLOCK], tl.float32)
    for k in tl.static_range(K):
        acc += tl.load(y_ptr + (t * K + k) * HD + cols, mask=m, other=0.0)
    tl.store(out_ptr + t * HD + cols, acc.to(out_ptr.dtype.element_ty), mask=m)


def kernel(x0, experts_gate_up_proj, experts_down_proj, gate_weight,
           BN=32, BK=256, BH=256, NW=8, RB=8, RTORCH=0):
    Bsz, S, HD = x0.shape
    T = Bsz * S
    E, I2, _ = experts_gate_up_proj.shape
    I = I2 // 2
    K = TOPK
    dev = x0.device
    x = x0.reshape(T, HD).contiguous()
    w1 = experts_gate_up_proj.contiguous()
    w2 = experts_down_proj.contiguous()
    out = torch.empty((T, HD), device=dev, dtype=x0.dtype)

    # Paths and tile sizes from the token count only (never from values or the device).
    if T == 1:
        s = _scratch(dev, E, HD)
        gw = gate_weight.contiguous()
        if RTORCH:
            logits = F.linear(x, gw)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float)
            top_p, top_i = torch.topk(probs, K, dim=-1)
            ids = top_i.reshape(K).to(torch.int32)
            rw = (top_p / top_p.sum(dim=-1, keepdim=True)).to(logits.dtype).float().reshape(K)
        else:
            ids, rw = s["ids"], s["rw"]
            ng = triton.cdiv(E, RB)
            _router1_kernel[(ng,)](x, gw, s["lg"], s["cnt"][0:1], ids, rw, E, HD, ng, RB=RB,
                                   BKR=min(1024, triton.next_power_of_2(HD)), EP=triton.next_power_of_2(E),
                                   K=K, num_warps=4)
        nprog = K * triton.cdiv(I, BN)
        _moe1_kernel[(K, triton.cdiv(I, BN))](x, w1, w2, ids, rw, s["acc"], s["cnt"][1:2], out, HD, I, nprog,
                                              BN=BN, BK=BK, BH=BH, num_warps=NW)
        return out.reshape(Bsz, S, HD)

    # Router, exactly as the model's Qwen3MoeTopKRouter (logits in the input dtype, softmax in fp32, topk).
    logits = F.linear(x, gate_weight)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    top_p, top_i = torch.topk(probs, K, dim=-1)
    top_i = top_i.contiguous()
    # 2+ tokens: v1 unchanged (GPU-proven): the module's renormalise and cast, then 3 Triton launches.
    top_v = (top_p / top_p.sum(dim=-1, keepdim=True)).to(logits.dtype).contiguous()
    P = T * K
    PP = triton.next_power_of_2(P)
    h = torch.empty((P, I), device=dev, dtype=torch.float32)
    y = torch.empty((P, HD), device=dev, dtype=torch.float32)
    _gate_up_dot_kernel[(P, triton.cdiv(I, 32))](x, w1, top_i, h, P, HD, I, K=K, PP=PP,
                                                 BN=32, BK=128, num_warps=4, num_stages=3)
    _down_dot_kernel[(P, triton.cdiv(HD, 32))](h, w2, top_i, top_v, y, P, HD, I, PP=PP,
                                               BH=32, BK=128, num_warps=4, num_stages=3)
    _combine_kernel[(T, triton.cdiv(HD, 512))](y, out, HD, K=K, BLOCK=512, num_warps=4)
    return out.reshape(Bsz, S, HD)
