"""Sparse MoE block (Qwen3-MoE style) for decode: torch router + 3 Triton launches, no atomics, no scans.

Routing: the model's own ops in torch (F.linear in the input dtype, softmax in fp32, top-k, renormalise,
cast), so the experts picked are exactly the reference's (same ops, same shapes, same device).

Experts, one program per (pair q = t*K + k, block of output rows). Every program reads the P = T*K routed
expert ids (<= 256 ints) and is the "head" of its expert only if q is the first pair routed to that expert;
other programs do nothing (their loop runs 0 times). A head walks all pairs of its expert in index order
(found by min-reductions, no prefix scans), BM tokens at a time, so each chosen expert's weights are read
once for all its tokens. Each program depends only on earlier launches (no flags, no cross-program waits).
  K1 gate_up: h[q, :] = silu(x_t . Wg[e]) * (x_t . Wu[e])       (fp32 scratch, row q)
  K2 down:    y[q, :] = w_q * (h[q, :] . Wd[e])                   (fp32 scratch, row q; every row written once)
  K3 combine: out[t, :] = sum_k y[t*K + k, :]                     (cast to the output dtype)
1 token: K1/K2 are GEMVs on CUDA cores (fp32 multiply-and-sum), many small programs, bound by reading the
8 experts' weights. 2+ tokens: K1/K2 take 16-token tiles on the tensor cores with tl.dot on operands
upcast to fp32 (bf16 values are exact in tf32, and the interpreter's fp32 dot is exact), pipelined loads.
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

TOPK = 8
# Added by the user for the tuner (the agent chose the one-token tiles on paper): the one-token path's
# gate/up rows per program and K-block, down rows per program and K-block, and warps. The first values
# are the agent's, judged on an H100 on 2026-12-07 (2.181x); the tuner searches the rest.
SPACE = {"BN1": [4, 8, 2, 16], "BKG1": [512, 256, 1024], "BH1": [8, 16, 4], "BKD1": [256, 512, 128],
         "NW1": [4, 8, 2]}
# The fp32 partial products of a program (two BN1 x BKG1 tiles for gate and up) stay in registers.
CONSTRAINTS = ["BN1 * BKG1 <= 8192", "BH1 * BKD1 <= 8192"]


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
def _gate_up_kernel(x_ptr, w1_ptr, idx_ptr, h_ptr, P, HD, I,
                    K: tl.constexpr, PP: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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
        acc_g = tl.zeros([BM, BN, BK], tl.float32)
        acc_u = tl.zeros([BM, BN, BK], tl.float32)
        for k0 in range(0, HD, BK):
            kk = k0 + ak
            km = kk < HD
            xv = tl.load(x_ptr + tok[:, None] * HD + kk[None, :], mask=rmask[:, None] & km[None, :],
                         other=0.0).to(tl.float32)
            wm = nmask[:, None] & km[None, :]
            wg = tl.load(wbase + an[:, None] * HD + kk[None, :], mask=wm, other=0.0).to(tl.float32)
            wu = tl.load(wbase + (an[:, None] + I) * HD + kk[None, :], mask=wm, other=0.0).to(tl.float32)
            acc_g += xv[:, None, :] * wg[None, :, :]
            acc_u += xv[:, None, :] * wu[None, :, :]
        g = tl.sum(acc_g, axis=2)
        u = tl.sum(acc_u, axis=2)
        hv = g / (1.0 + tl.exp(-g)) * u
        tl.store(h_ptr + q[:, None] * I + an[None, :], hv, mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _down_kernel(h_ptr, w2_ptr, idx_ptr, rw_ptr, y_ptr, P, HD, I,
                 PP: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr):
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
        acc = tl.zeros([BM, BH, BK], tl.float32)
        for k0 in range(0, I, BK):
            kk = k0 + ak
            km = kk < I
            hv = tl.load(h_ptr + q[:, None] * I + kk[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
            wd = tl.load(wbase + ah[:, None] * I + kk[None, :], mask=hmask[:, None] & km[None, :],
                         other=0.0).to(tl.float32)
            acc += hv[:, None, :] * wd[None, :, :]
        yv = tl.sum(acc, axis=2) * rw[:, None]
        tl.store(y_ptr + q[:, None] * HD + ah[None, :], yv, mask=rmask[:, None] & hmask[None, :])


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


def kernel(x0, experts_gate_up_proj, experts_down_proj, gate_weight, BN1=4, BKG1=512, BH1=8, BKD1=256, NW1=4):
    Bsz, S, HD = x0.shape
    T = Bsz * S
    E, I2, _ = experts_gate_up_proj.shape
    I = I2 // 2
    K = TOPK
    dev = x0.device
    x = x0.reshape(T, HD).contiguous()
    w1 = experts_gate_up_proj.contiguous()
    w2 = experts_down_proj.contiguous()

    # Router, exactly as the model's Qwen3MoeTopKRouter (logits in the input dtype, softmax in fp32).
    logits = F.linear(x, gate_weight)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    top_v, top_i = torch.topk(probs, K, dim=-1)
    top_v = (top_v / top_v.sum(dim=-1, keepdim=True)).to(logits.dtype).contiguous()
    top_i = top_i.contiguous()

    P = T * K
    PP = triton.next_power_of_2(P)
    h = torch.empty((P, I), device=dev, dtype=torch.float32)
    y = torch.empty((P, HD), device=dev, dtype=torch.float32)
    out = torch.empty((T, HD), device=dev, dtype=x0.dtype)

    # Paths and tile sizes from the token count only (never from values).
    if T == 1:   # GEMV on CUDA cores: 8 experts x 192 + 8 x 256 small programs, one or two waves
        _gate_up_kernel[(P, triton.cdiv(I, BN1))](x, w1, top_i, h, P, HD, I, K=K, PP=PP,
                                                  BM=1, BN=BN1, BK=BKG1, num_warps=NW1)
        _down_kernel[(P, triton.cdiv(HD, BH1))](h, w2, top_i, top_v, y, P, HD, I, PP=PP,
                                                BM=1, BH=BH1, BK=BKD1, num_warps=NW1)
    else:        # 16-token tiles on the tensor cores, pipelined weight loads
        _gate_up_dot_kernel[(P, triton.cdiv(I, 32))](x, w1, top_i, h, P, HD, I, K=K, PP=PP,
                                                     BN=32, BK=128, num_warps=4, num_stages=3)
        _down_dot_kernel[(P, triton.cdiv(HD, 32))](h, w2, top_i, top_v, y, P, HD, I, PP=PP,
                                                   BH=32, BK=128, num_warps=4, num_stages=3)
    _combine_kernel[(T, triton.cdiv(HD, 512))](y, out, HD, K=K, BLOCK=512, num_warps=4)
    return out.reshape(Bsz, S, HD)
