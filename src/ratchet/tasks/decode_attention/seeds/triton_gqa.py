"""Decode attention in Triton: one program per (sequence, kv head), the whole query group at once.

The G query heads that share a kv head are loaded together as a [G, D] tile (padded to 16 rows, the least
tl.dot takes, and D padded to a power of two), so each key and value block is read from memory once for the
whole group and both products run on tensor cores: scores = q . k^T, then acc += p . v. The context is walked
in BLOCK_L positions up to seq_lens[b] (masked loads: nothing beyond is read) with an online softmax
(Milakov & Gimelshein, 2018): a running max m and sum s per head, and the accumulator rescaled by
exp(m_old - m_new) whenever the max grows. Scores, softmax and accumulator are fp32; the weights are rounded
to bf16 only as the operand of the p . v product, as FlashAttention does.
On the CPU (Triton's interpreter, for tests) the EMULATE helpers of _shared.py (bf16, dot) make the
interpreter compute the numbers the GPU does.
Wide heads go in blocks: a [BLOCK_G, head] tile holds at most 8192 elements, so Llama's D = 128 keeps
groups of up to 64 heads whole, and DeepSeek-V3's absorbed MLA (128 heads over one latent kv head, D = 576)
runs 8 programs of 16 heads per sequence, launched side by side so the later ones read keys and values
from L2. The head dim goes in two power-of-two parts (576 = 512 + 64, 96 = 64 + 32) rather than one
padded to the next power of two, which for 576 would double the tiles.
B * Hkv programs are plenty at batch 64 and beyond, but a single sequence gets only 8 (Hkv) of an H200's 132
SMs, each walking the whole context: that is what triton_split_k.py is about. On the H200 (2026-11-30,
docs/results/landscapes/2026-11-30__decode_attention__triton_gqa.json): 68 us at B = 1, L = 4096 (6% of the
roofline), 0.8-0.92 of it from B = 64.
"""

import math

import torch
import triton
import triton.language as tl

from ratchet.tasks.decode_attention.seeds._shared import bf16, dot, floor_pow2, head_parts, interpreted

SPACE = {"BLOCK_L": [64, 32, 128], "num_warps": [4, 8]}

# Elements of the [BLOCK_G, head] query and accumulator tiles, and of half the [BLOCK_L, head] key and value
# tiles: with Llama's D = 128 a whole group of up to 64 heads stays in one program and BLOCK_L is the config's;
# DeepSeek-V3's absorbed MLA (G = 128, D = 576) gets 16 heads and 16 positions per program and block, which
# fits an SM's shared memory (a whole group at the config's 64 positions asked for 1 MB on the H200).
_MAX_TILE = 8192


def tiles(G, D, BLOCK_L):
    """(BLOCK_G, BLOCK_DA, BLOCK_DB, BLOCK_L, head blocks) for a group of G heads of size D."""
    block_da, block_db = head_parts(D)
    width = block_da + block_db
    block_g = max(16, min(triton.next_power_of_2(G), floor_pow2(_MAX_TILE // width)))
    block_l = max(16, min(BLOCK_L, floor_pow2(2 * _MAX_TILE // width)))
    return block_g, block_da, block_db, block_l, triton.cdiv(G, block_g)


@triton.jit
def _decode_gqa(q_ptr, k_ptr, v_ptr, lens_ptr, out_ptr,
                stride_qb, stride_qh, stride_kb, stride_kh, stride_kl, stride_vb, stride_vh, stride_vl,
                stride_ob, stride_oh, scale, G, D, DV,
                BLOCK_G: tl.constexpr, BLOCK_DA: tl.constexpr, BLOCK_DB: tl.constexpr, BLOCK_L: tl.constexpr,
                BLOCK_VA: tl.constexpr, BLOCK_VB: tl.constexpr, EMULATE: tl.constexpr):
    # Head blocks of one (sequence, kv head) are neighbours in launch order: they read the same keys and
    # values at about the same time, so all but the first read them from L2.
    g = tl.program_id(0) * BLOCK_G + tl.arange(0, BLOCK_G)
    b = tl.program_id(1).to(tl.int64)  # int64: offsets into a large cache can pass 2^31
    kvh = tl.program_id(2).to(tl.int64)
    seq_len = tl.load(lens_ptr + b)
    da = tl.arange(0, BLOCK_DA)
    da_ok = da < D  # all true but for heads under 16
    cols = tl.arange(0, BLOCK_L)
    head_ok = g < G
    heads = kvh * G + g
    q_row = q_ptr + b * stride_qb + heads[:, None] * stride_qh
    qa = tl.load(q_row + da[None, :], mask=head_ok[:, None] & da_ok[None, :], other=0.0)
    if BLOCK_DB > 0:  # the rest of the head dim
        db = BLOCK_DA + tl.arange(0, BLOCK_DB)
        db_ok = db < D
        qb = tl.load(q_row + db[None, :], mask=head_ok[:, None] & db_ok[None, :], other=0.0)
    # The values' width DV (D but for MLA's latent alone as the value) in two parts as well.
    dva = tl.arange(0, BLOCK_VA)
    dva_ok = dva < DV
    if BLOCK_VB > 0:
        dvb = BLOCK_VA + tl.arange(0, BLOCK_VB)
        dvb_ok = dvb < DV
        acc_b = tl.zeros([BLOCK_G, BLOCK_VB], dtype=tl.float32)
    k_row = k_ptr + b * stride_kb + kvh * stride_kh
    v_row = v_ptr + b * stride_vb + kvh * stride_vh
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc_a = tl.zeros([BLOCK_G, BLOCK_VA], dtype=tl.float32)
    # Every block starts below seq_len (>= 1), so it holds a valid position and m_new is finite: the first
    # alpha is exp(-inf) = 0, never NaN.
    for start in range(0, seq_len, BLOCK_L):
        pos = start + cols
        valid = pos < seq_len
        k_at = k_row + pos[:, None] * stride_kl
        v_at = v_row + pos[:, None] * stride_vl
        ka = tl.load(k_at + da[None, :], mask=valid[:, None] & da_ok[None, :], other=0.0)
        scores = dot(qa, tl.trans(ka), EMULATE)
        if BLOCK_DB > 0:
            kb = tl.load(k_at + db[None, :], mask=valid[:, None] & db_ok[None, :], other=0.0)
            scores += dot(qb, tl.trans(kb), EMULATE)
        # fp32 by a cast: torch.compile's Inductor may hand the scale over as fp64
        scores = (scores * scale).to(tl.float32)  # [BLOCK_G, BLOCK_L]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        s = s * alpha + tl.sum(p, axis=1)
        p16 = bf16(p, EMULATE)
        va = tl.load(v_at + dva[None, :], mask=valid[:, None] & dva_ok[None, :], other=0.0)
        acc_a = acc_a * alpha[:, None] + dot(p16, va, EMULATE)
        if BLOCK_VB > 0:
            vb = tl.load(v_at + dvb[None, :], mask=valid[:, None] & dvb_ok[None, :], other=0.0)
            acc_b = acc_b * alpha[:, None] + dot(p16, vb, EMULATE)
        m = m_new
    out_row = out_ptr + b * stride_ob + heads[:, None] * stride_oh
    tl.store(out_row + dva[None, :], bf16(acc_a / s[:, None], EMULATE).to(out_ptr.dtype.element_ty),
             mask=head_ok[:, None] & dva_ok[None, :])
    if BLOCK_VB > 0:
        tl.store(out_row + dvb[None, :], bf16(acc_b / s[:, None], EMULATE).to(out_ptr.dtype.element_ty),
                 mask=head_ok[:, None] & dvb_ok[None, :])


def _stages(width):
    """Two pipeline stages for wide heads: fewer copies of the [16, 576] key and value tiles in flight."""
    return {"num_stages": 2} if width > 256 else {}


def kernel(q, k_cache, v_cache, seq_lens, BLOCK_L=64, num_warps=4):
    # The kernel walks the head dim with unit stride.
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    seq_lens = seq_lens.contiguous()
    B, Hq, D = q.shape
    Hkv, DV = k_cache.shape[1], v_cache.shape[-1]
    G = Hq // Hkv
    out = torch.empty((B, Hq, DV), dtype=q.dtype, device=q.device)
    if B == 0 or Hq == 0:
        return out
    block_g, block_da, block_db, block_l, head_blocks = tiles(G, D, BLOCK_L)
    block_va, block_vb = head_parts(DV)  # the values' width in parts, as the keys' (DV < D: MLA's latent alone)
    _decode_gqa[(head_blocks, B, Hkv)](
        q, k_cache, v_cache, seq_lens, out,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        1.0 / math.sqrt(D), G, D, DV,
        BLOCK_G=block_g, BLOCK_DA=block_da, BLOCK_DB=block_db, BLOCK_L=block_l,
        BLOCK_VA=block_va, BLOCK_VB=block_vb,
        EMULATE=interpreted(), num_warps=num_warps, **_stages(block_da + block_db),
    )
    return out
