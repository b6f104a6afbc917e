"""Decode attention in Triton, split-K (flash-decoding): the context is cut into pieces across programs.

One program per (sequence, kv head) gives a single sequence 8 programs on an H200's 132 SMs, each walking
the whole context. Here program (b, kv head, split) walks only its piece of the context with the online
softmax of triton_gqa.py and writes, for each query head of the group, its partial state to an fp32
workspace: the piece's max score m_i, sum of weights s_i = sum exp(score - m_i) and unnormalized output
acc_i = sum exp(score - m_i) v. A second small kernel, one program per (sequence, query head), merges the
pieces exactly: with m = max m_i, out = sum exp(m_i - m) acc_i / sum exp(m_i - m) s_i.
Pieces beyond a row's seq_lens do nothing and leave (m, s, acc) = (-inf, 0, 0): a weight of exp(-inf) = 0
in the merge (piece 0 is never empty, so m is finite). Lengths never leave the device (the split count
comes from the padded L), so the kernel can be captured in a CUDA graph.
SPLITS == 0 picks enough pieces for ~4 programs per SM, at least 4 blocks each (for 64-head wgmma tiles,
which fill an SM alone: one wave of programs, at least 128 keys each); SPLITS == -1 as many pieces as
fill one wave of the programs that fit an SM by shared memory (measured 2026-11-30 (largest shapes): no better than 32
pieces, see _split_count); with one piece (large batches) the first kernel writes the normalized output itself and
the merge is skipped.
The head dim goes in two power-of-two parts (DeepSeek-V3's absorbed MLA: G = 128, D = 576 = 512 + 64), as
in triton_gqa.py, and so does the values' width (DV = D, or MLA's latent alone: 512). A group of 64 heads or
more (MLA) goes in 64-head blocks on 8 warps, the rows of Hopper's warpgroup MMA; and where the values are
the keys' own memory (MLA passes its cache as keys and its first 512 channels as values), each tile is
loaded once and holds twice the positions.
The EMULATE helpers make the interpreter (CPU tests) compute what the GPU does; see _shared.py.
On the H200 (2026-11-30, docs/results/landscapes/2026-11-30__decode_attention__triton_split_k.json): 16 us at
B = 1, L = 4096 and 51-58 us at L = 32768 (the decode-attention goals: 8 and 35), 0.85-0.92 of the roofline at
B = 8 to 256. MLA (2026-11-30, wgmma MLA tiles): 89 us at B = 1, L = 32768 (eager reference 111) and 469 us at
B = 32, L = 8192 (758). With the latent alone as the value (2026-12-01, aligned e2e caches, B = 32): 1051 us
at L = 32768 and 281 at 8192 (1117 and 302 with values of 576), level with the reference under torch.compile
on an aligned cache (1043 and 289): at 128 heads a kv head the reference is two cuBLAS GEMMs.
"""

import functools
import math

import torch
import triton
import triton.language as tl

from ratchet.tasks.decode_attention.seeds._shared import bf16, dot, floor_pow2, head_parts, interpreted

SPACE = {"SPLITS": [0, -1, 32], "BLOCK_L": [64, 32], "num_warps": [4, 8]}

_PROGRAMS_PER_SM = 4
_ACC_PER_THREAD = 72  # fp32 accumulator elements per thread (tiles())
_WGMMA_ROWS = 64  # Hopper's warpgroup MMA takes 64 rows per warpgroup; fewer fall back to mma.sync
_MAX_KEYS_TILE = 18432  # elements of a [BLOCK_L, head] key tile (tiles()): 32 positions of 576
_MIN_BLOCKS_PER_SPLIT = 4
_MIN_KEYS_PER_WGMMA_SPLIT = 128
_DEFAULT_SMS = 132  # an H100 / H200; the interpreter has no SMs to ask about
_SHARED_PER_SM = 232448  # bytes of shared memory an H100 / H200 block may use


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


@triton.jit
def _split_partials(q_ptr, k_ptr, v_ptr, lens_ptr, out_ptr, m_ptr, s_ptr, acc_ptr,
                    stride_qb, stride_qh, stride_kb, stride_kh, stride_kl, stride_vb, stride_vh, stride_vl,
                    stride_ob, stride_oh, scale, Hq, Hkv, G, D, DV, CHUNK, SPLITS,
                    BLOCK_G: tl.constexpr, BLOCK_DA: tl.constexpr, BLOCK_DB: tl.constexpr, BLOCK_L: tl.constexpr,
                    BLOCK_VA: tl.constexpr, BLOCK_VB: tl.constexpr,
                    SAME_KV: tl.constexpr, DIRECT: tl.constexpr, EMULATE: tl.constexpr):
    # Head blocks of one (sequence, kv head, piece) are neighbours in launch order: they read the same keys
    # and values at about the same time, so all but the first read them from L2.
    g = tl.program_id(0) * BLOCK_G + tl.arange(0, BLOCK_G)
    b = tl.program_id(1).to(tl.int64) // Hkv  # int64: offsets into a large cache can pass 2^31
    kvh = tl.program_id(1).to(tl.int64) % Hkv
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    # The head dim in two power-of-two parts, BLOCK_DA <= D and BLOCK_DB covering the rest (0: none), so a
    # head of 576 (MLA) is 512 + 64 instead of one padded 1024.
    da = tl.arange(0, BLOCK_DA)
    da_ok = da < D  # all true but for heads under 16
    cols = tl.arange(0, BLOCK_L)
    head_ok = g < G
    heads = kvh * G + g
    q_row = q_ptr + b * stride_qb + heads[:, None] * stride_qh
    qa = tl.load(q_row + da[None, :], mask=head_ok[:, None] & da_ok[None, :], other=0.0)
    if BLOCK_DB > 0:
        db = BLOCK_DA + tl.arange(0, BLOCK_DB)
        db_ok = db < D
        qb = tl.load(q_row + db[None, :], mask=head_ok[:, None] & db_ok[None, :], other=0.0)
    # The values' width DV in two parts too (DV == D but for MLA with its latent alone as the value).
    va_cols = tl.arange(0, BLOCK_VA)
    va_ok = va_cols < DV
    if BLOCK_VB > 0:
        vb_cols = BLOCK_VA + tl.arange(0, BLOCK_VB)
        vb_ok = vb_cols < DV
        acc_b = tl.zeros([BLOCK_G, BLOCK_VB], dtype=tl.float32)
    k_row = k_ptr + b * stride_kb + kvh * stride_kh
    v_row = v_ptr + b * stride_vb + kvh * stride_vh
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc_a = tl.zeros([BLOCK_G, BLOCK_VA], dtype=tl.float32)
    lo = split * CHUNK  # CHUNK is a multiple of BLOCK_L: only seq_len cuts a block short
    for start in range(lo, tl.minimum(lo + CHUNK, seq_len), BLOCK_L):
        pos = start + cols
        valid = pos < seq_len
        k_at = k_row + pos[:, None] * stride_kl
        v_at = v_row + pos[:, None] * stride_vl
        ka = tl.load(k_at + da[None, :], mask=valid[:, None] & da_ok[None, :], other=0.0)
        scores = dot(qa, tl.trans(ka), EMULATE)
        if BLOCK_DB > 0:
            kb = tl.load(k_at + db[None, :], mask=valid[:, None] & db_ok[None, :], other=0.0)
            scores += dot(qb, tl.trans(kb), EMULATE)
        # fp32 by a cast: torch.compile's Inductor may hand the scale over as fp64 (it did on the H200)
        scores = (scores * scale).to(tl.float32)  # [BLOCK_G, BLOCK_L]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: every block holds a valid position
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        s = s * alpha + tl.sum(p, axis=1)
        p16 = bf16(p, EMULATE)
        # SAME_KV: the values are the keys' own memory (MLA's latent cache is both), already loaded; their
        # parts are the keys' parts (kernel() checks), so a narrower value is the keys' first part alone.
        if SAME_KV:
            va = ka
        else:
            va = tl.load(v_at + va_cols[None, :], mask=valid[:, None] & va_ok[None, :], other=0.0)
        acc_a = acc_a * alpha[:, None] + dot(p16, va, EMULATE)
        if BLOCK_VB > 0:
            if SAME_KV:
                vb = kb
            else:
                vb = tl.load(v_at + vb_cols[None, :], mask=valid[:, None] & vb_ok[None, :], other=0.0)
            acc_b = acc_b * alpha[:, None] + dot(p16, vb, EMULATE)
        m = m_new
    if DIRECT:  # one piece holds the whole context: normalize and write the output here
        out_row = out_ptr + b * stride_ob + heads[:, None] * stride_oh
        tl.store(out_row + va_cols[None, :], bf16(acc_a / s[:, None], EMULATE).to(out_ptr.dtype.element_ty),
                 mask=head_ok[:, None] & va_ok[None, :])
        if BLOCK_VB > 0:
            tl.store(out_row + vb_cols[None, :], bf16(acc_b / s[:, None], EMULATE).to(out_ptr.dtype.element_ty),
                     mask=head_ok[:, None] & vb_ok[None, :])
    else:
        row = (b * Hq + heads) * SPLITS + split  # workspace [B, Hq, SPLITS] (and [..., DV] for acc)
        tl.store(m_ptr + row, m, mask=head_ok)
        tl.store(s_ptr + row, s, mask=head_ok)
        tl.store(acc_ptr + row[:, None] * DV + va_cols[None, :], acc_a, mask=head_ok[:, None] & va_ok[None, :])
        if BLOCK_VB > 0:
            tl.store(acc_ptr + row[:, None] * DV + vb_cols[None, :], acc_b,
                     mask=head_ok[:, None] & vb_ok[None, :])


@triton.jit
def _merge_splits(m_ptr, s_ptr, acc_ptr, out_ptr, stride_ob, stride_oh, Hq, D, SPLITS,
                  SPLITS_P2: tl.constexpr, BLOCK_D: tl.constexpr, MERGE_BLOCK: tl.constexpr,
                  EMULATE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    base = (b * Hq + h) * SPLITS
    pieces = tl.arange(0, SPLITS_P2)
    m_all = tl.load(m_ptr + base + pieces, mask=pieces < SPLITS, other=float("-inf"))
    s_all = tl.load(s_ptr + base + pieces, mask=pieces < SPLITS, other=0.0)
    m = tl.max(m_all, axis=0)
    denom = tl.sum(s_all * tl.exp(m_all - m), axis=0)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    # MERGE_BLOCK pieces per step, not one: a [MERGE_BLOCK, D] tile keeps that many loads in flight (at
    # MLA, B = 1, L = 32768, a head merges 64 pieces of 576), and a loop keeps registers bounded at any
    # split count. Past the split count a piece weighs exp(-inf) = 0.
    for first in range(0, SPLITS, MERGE_BLOCK):
        idx = first + tl.arange(0, MERGE_BLOCK)
        ok = idx < SPLITS
        weight = tl.exp(tl.load(m_ptr + base + idx, mask=ok, other=float("-inf")) - m)
        tile = tl.load(acc_ptr + (base + idx)[:, None] * D + d[None, :], mask=ok[:, None] & d_ok[None, :], other=0.0)
        acc += tl.sum(tile * weight[:, None], axis=0)
    out = acc / denom
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d, bf16(out, EMULATE).to(out_ptr.dtype.element_ty),
             mask=d_ok)


def _split_count(programs, L, block, device, requested, G=1, wgmma=False, per_sm=_PROGRAMS_PER_SM):
    """Pieces of the context, for ``programs`` programs per piece (B x Hkv x head blocks).

    mma.sync tiles: enough pieces for _PROGRAMS_PER_SM programs per SM, each piece at least 4 G keys, so
    the workspace a piece writes (G x D fp32) stays under a quarter of the keys and values it reads.
    A wgmma tile (64 heads, 8 warps, all 255 registers) runs one program per SM, and is compute-bound at
    MLA: the most pieces that fit one wave of programs, each at least _MIN_KEYS_PER_WGMMA_SPLIT keys. On the
    H200 (2026-11-30, wgmma MLA tiles) the 4 G rule left DeepSeek's decode at B = 1, L = 1024 with 4 programs
    (2 pieces x 2 head blocks), 2.4% slower than eager attention over the whole step; compute there, not
    the workspace, is the cost.
    requested == -1 (one wave): as many pieces as fill ``per_sm`` programs per SM exactly once, each at
    least _MIN_BLOCKS_PER_SPLIT blocks. For sm_90 the Llama tile (BLOCK_L 64, D 128) takes 70 KB of shared
    memory, so 3 programs fit an SM, not 4. At B = 1, L = 32768 on the H200 (2026-11-30's first landscape) the
    default's 528 programs (1.33 waves of 396) took 57.8 us and 256 programs 50.6. A later run (2026-11-30, largest
    shapes) measured the one wave (392 programs): 52.7 us, against 51.3 for 32 pieces and 57.8 for the default
    in the same call, and 144 / 141 / 164 us at L = 131072: filling the wave is not what 32 pieces gain.
    """
    blocks = triton.cdiv(L, block)
    if requested > 0:
        return max(1, min(requested, blocks))
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else _DEFAULT_SMS
    if wgmma:
        return max(1, min(sms // programs, blocks // max(1, _MIN_KEYS_PER_WGMMA_SPLIT // block)))
    if requested == -1:
        return max(1, min(per_sm * sms // programs, blocks // _MIN_BLOCKS_PER_SPLIT))
    want = triton.cdiv(_PROGRAMS_PER_SM * sms, programs)
    min_blocks = max(_MIN_BLOCKS_PER_SPLIT, triton.cdiv(4 * G, block))
    return max(1, min(want, blocks // min_blocks))


def tiles(G, D, BLOCK_L, num_warps=4, same_kv=False):
    """(BLOCK_G, BLOCK_DA, BLOCK_DB, BLOCK_L, head blocks) for a group of G heads of size D.

    The fp32 accumulator [BLOCK_G, head] gets at most _ACC_PER_THREAD elements per thread, so more warps
    take more heads: at DeepSeek's MLA heads (G = 128, D = 576), 16 heads with 4 warps, fewer head blocks
    re-reading the same keys from L2. Those 16 rows run on mma.sync, Ampere's tensor-core path. With 8 warps
    and a group of 64 heads or more, the block is 64 heads, the rows Hopper's warpgroup MMA (wgmma) takes:
    2 head blocks at MLA instead of 8, at 144 accumulator elements per thread (Triton 3.9 for sm_90: 255
    registers and 224 bytes of spills, found on the CPU). The key tile [BLOCK_L, head] is at most
    _MAX_KEYS_TILE elements (32 positions of 576), twice that when the values are the keys' own memory
    (same_kv: no value tiles in shared memory; MLA's 64 positions then take 216 KB of the H200's 227).
    """
    block_da, block_db = head_parts(D)
    width = block_da + block_db
    threads = 32 * num_warps
    block_g = max(16, min(triton.next_power_of_2(G), floor_pow2(_ACC_PER_THREAD * threads // width)))
    if num_warps >= 8 and G >= _WGMMA_ROWS:
        block_g = max(block_g, _WGMMA_ROWS)
    block_l = max(16, min(BLOCK_L, floor_pow2(_MAX_KEYS_TILE * (2 if same_kv else 1) // width)))
    return block_g, block_da, block_db, block_l, triton.cdiv(G, block_g)


def _programs_per_sm(block_g, width, block_l, same_kv):
    """Programs of the partials kernel that fit an SM by shared memory (at most _PROGRAMS_PER_SM): two
    stages of key (and value) tiles and the queries, all bf16. Compiled for sm_90, the Llama tile (16 x 128,
    64 positions) took 71680 bytes against 69632 counted here."""
    tile = 2 * block_l * width * 2 * (1 if same_kv else 2) + block_g * width * 2
    return max(1, min(_PROGRAMS_PER_SM, _SHARED_PER_SM // tile))


def _same_kv(k_cache, v_cache):
    """The values are the keys' own memory, so each tile is loaded once: MLA passes its latent cache as both,
    whole (D == DV) or with the latent alone as the value (DV the keys' first power-of-two part, 512 of 576,
    as DeepSeek-V3 runs it: no product over the rope channels)."""
    D, DV = k_cache.shape[-1], v_cache.shape[-1]
    return (k_cache.data_ptr() == v_cache.data_ptr() and k_cache.shape[:-1] == v_cache.shape[:-1]
            and k_cache.stride() == v_cache.stride() and (DV == D or (DV < D and DV == head_parts(D)[0])))


def kernel(q, k_cache, v_cache, seq_lens, SPLITS=0, BLOCK_L=64, num_warps=4, WIDE_WARPS=8):
    """WIDE_WARPS: the warps for a group of 64 heads or more (MLA's 128), whatever num_warps says: 8 give
    64-head wgmma tiles (tiles()); 0 keeps num_warps. num_warps is tuned on the Llama groups of 4 and 8,
    which outnumber the MLA shapes in the task, and would otherwise decide MLA's tiles too."""
    # The kernels walk the head dim with unit stride.
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    seq_lens = seq_lens.contiguous()
    B, Hq, D = q.shape
    Hkv, L, DV = k_cache.shape[1], k_cache.shape[2], v_cache.shape[-1]
    G = Hq // Hkv
    out = torch.empty((B, Hq, DV), dtype=q.dtype, device=q.device)
    if B == 0 or Hq == 0:
        return out
    if WIDE_WARPS and G >= _WGMMA_ROWS:
        num_warps = WIDE_WARPS
    same_kv = _same_kv(k_cache, v_cache)
    block_g, block_da, block_db, block_l, head_blocks = tiles(G, D, BLOCK_L, num_warps, same_kv)
    block_va, block_vb = head_parts(DV)
    splits = _split_count(B * Hkv * head_blocks, L, block_l, q.device, SPLITS, G,
                          wgmma=block_g >= _WGMMA_ROWS and num_warps >= 8,
                          per_sm=_programs_per_sm(block_g, block_da + block_db, block_l, same_kv)
                          if SPLITS == -1 else _PROGRAMS_PER_SM)
    chunk = triton.cdiv(triton.cdiv(L, splits), block_l) * block_l  # whole blocks per piece
    splits = triton.cdiv(L, chunk)  # no piece past L
    direct = splits == 1
    emulate = interpreted()
    if direct:  # nothing to merge: the workspace arguments are never touched
        m_ws = s_ws = acc_ws = out
    else:
        m_ws = torch.empty((B, Hq, splits), dtype=torch.float32, device=q.device)
        s_ws = torch.empty((B, Hq, splits), dtype=torch.float32, device=q.device)
        acc_ws = torch.empty((B, Hq, splits, DV), dtype=torch.float32, device=q.device)
    _split_partials[(head_blocks, B * Hkv, splits)](
        q, k_cache, v_cache, seq_lens, out, m_ws, s_ws, acc_ws,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        1.0 / math.sqrt(D), Hq, Hkv, G, D, DV, chunk, splits,
        BLOCK_G=block_g, BLOCK_DA=block_da, BLOCK_DB=block_db, BLOCK_L=block_l, BLOCK_VA=block_va, BLOCK_VB=block_vb,
        SAME_KV=same_kv, DIRECT=direct, EMULATE=emulate, num_warps=num_warps,
        # Two pipeline stages for wide heads: fewer copies of the [16, 576] key and value tiles in flight.
        **({"num_stages": 2} if block_da + block_db > 256 else {}),
    )
    if not direct:
        _merge_splits[(B, Hq)](m_ws, s_ws, acc_ws, out, out.stride(0), out.stride(1), Hq, DV, splits,
                               SPLITS_P2=triton.next_power_of_2(splits), BLOCK_D=max(16, triton.next_power_of_2(DV)),
                               MERGE_BLOCK=min(8, triton.next_power_of_2(splits)), EMULATE=emulate,
                               num_warps=4)
    return out
