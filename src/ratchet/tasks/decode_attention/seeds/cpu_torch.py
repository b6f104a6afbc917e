"""Decode attention in plain torch, fp32 math: scores, a masked softmax, the weighted sum of values.

GQA without copying the cache: q [B, Hq, D] is viewed as [B, Hkv, G, D], so each group of G query heads
multiplies its own kv head's keys in one batched matmul. Positions at or beyond seq_lens[b] get a score of
-inf (weight exactly 0; the junk there is finite, so 0 * junk adds nothing). seq_lens never leaves the
device: no host sync, so the kernel can be captured in a CUDA graph.
The fp32 copies of the cache cost 2x its size in temporaries: CHUNK rows of the batch at a time bound them
(0 means the whole batch at once).
"""

import math

import torch

SPACE = {"CHUNK": [0, 8, 1]}


def kernel(q, k_cache, v_cache, seq_lens, CHUNK=0):
    B, Hq, D = q.shape
    Hkv, L = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    out = torch.empty((B, Hq, v_cache.shape[-1]), dtype=q.dtype, device=q.device)  # values may be narrower (MLA)
    positions = torch.arange(L, device=q.device)
    step = CHUNK or max(B, 1)
    for start in range(0, B, step):
        rows = slice(start, start + step)
        qg = q[rows].to(torch.float32).reshape(-1, Hkv, G, D)
        k = k_cache[rows].to(torch.float32)
        v = v_cache[rows].to(torch.float32)
        scores = torch.matmul(qg, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))  # [b, Hkv, G, L]
        invalid = positions[None, :] >= seq_lens[rows, None].to(torch.int64)  # [b, L]
        scores.masked_fill_(invalid[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[rows] = torch.matmul(probs, v).reshape(-1, Hq, out.shape[-1]).to(q.dtype)
    return out
