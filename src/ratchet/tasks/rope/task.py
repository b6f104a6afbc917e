"""RoPE, rotate-half (NeoX) style, on q [T, Hq, D] and k [T, Hkv, D]: math in fp32, outputs in q's dtype.

For each head, x1 = x[..., :D/2] and x2 = x[..., D/2:]; out = cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin),
with cos and sin [T, D/2] (one angle per token and frequency) shared by every head of q and k.
"""

import torch

from ratchet.task import (
    Cost, DEFAULT_TOLERANCES, ShapeRange, ShapeSet, Task, decode_weight, tensor_bytes,
)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    # float64 from the judge; at native dtype (the timed baseline) fp32 math, as the task asks.
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(wide)
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos.to(wide).unsqueeze(1), sin.to(wide).unsqueeze(1)  # [T, 1, D/2]: broadcast over heads
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def reference(q, k, cos, sin):
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


_THETAS = (500000.0, 10000.0)  # rotary bases: Llama-3; DeepSeek-V3 (and Llama-2, Mistral)
_MAX_POSITION = 131072  # Llama-3.1's and DeepSeek-V3's 128k context


def make_inputs(shape, dtype, device, generator):
    T, Hq, Hkv, D = shape["T"], shape["Hq"], shape["Hkv"], shape["D"]
    half = D // 2
    # Real rotary tables at random positions (not 0..T-1, so no two tokens share an angle pattern a kernel
    # could predict): inv_freq_i = theta^(-2i/D), angle = position * inv_freq, in float64 (an fp32 angle
    # near 1.3e5 rad keeps only ~1e-2 rad), rounded once to fp32. cos and sin are always fp32, whatever the
    # dtype of q and k, as in vLLM's and SGLang's cos/sin caches.
    theta = _THETAS[int(torch.randint(0, len(_THETAS), (1,), generator=generator, device=device).item())]
    positions = torch.randint(0, _MAX_POSITION, (T,), generator=generator, device=device)
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / D)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(torch.float32), angles.sin().to(torch.float32)
    # Heads of different magnitude (log-uniform scale in [0.3, 3] per token and head), as projected q and k
    # are: swapped halves, a wrong sign, interleaved (GPT-J) pairs or another token's angles are far off.
    q = torch.randn(T, Hq, D, generator=generator, device=device)
    q = q * 10.0 ** (torch.rand(T, Hq, 1, generator=generator, device=device) - 0.5)
    k = torch.randn(T, Hkv, D, generator=generator, device=device)
    k = k * 10.0 ** (torch.rand(T, Hkv, 1, generator=generator, device=device) - 0.5)
    return q.to(dtype), k.to(dtype), cos, sin


def cost(shape, dtype):
    T, Hq, Hkv, D = shape["T"], shape["Hq"], shape["Hkv"], shape["D"]
    # Read q, k and the fp32 cos/sin rows once; write q_out and k_out. Two multiplies and an add per output.
    heads = tensor_bytes((T, Hq, D), dtype) + tensor_bytes((T, Hkv, D), dtype)
    tables = 2 * tensor_bytes((T, D // 2), torch.float32)
    return Cost(bytes=2 * heads + tables, flops=3.0 * T * (Hq + Hkv) * D)




# (Hq, Hkv, D): Llama-3-8B, Llama-3-70B, DeepSeek-V3's decoupled rope part (128 heads; one shared k_pe head)
_MODELS = ((32, 8, 128), (64, 8, 128), (128, 1, 64))

TASK = Task(
    name="rope",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"T": t, "Hq": hq, "Hkv": hkv, "D": d} for hq, hkv, d in _MODELS for t in (1, 64, 256, 4096)]
        + [{"T": 16384, "Hq": 32, "Hkv": 8, "D": 128}, {"T": 16384, "Hq": 128, "Hkv": 1, "D": 64}],
        # Odd token counts up to 8191 (the largest draw, 128 x 128 heads, stays at rmsnorm's 134M elements);
        # 28/4 heads (Qwen2-7B), odd head counts, and D = 96 (half 48, not a power of two) catch kernels
        # that assume the public models' sizes. Hq and Hkv are drawn apart (rope needs no GQA ratio), so
        # Hkv = 5 tests an odd k head count.
        held_out=ShapeRange(dims={"T": (1, 8191), "Hq": [32, 28, 64, 128, 40], "Hkv": [8, 4, 1, 5],
                                  "D": [128, 64, 96]}, count=2),
    ),
    cpu=ShapeSet(
        public=[
            {"T": 1, "Hq": 32, "Hkv": 8, "D": 128},
            {"T": 7, "Hq": 16, "Hkv": 2, "D": 64},
            {"T": 33, "Hq": 8, "Hkv": 1, "D": 128},
            {"T": 64, "Hq": 4, "Hkv": 4, "D": 96},
        ],
        held_out=ShapeRange(dims={"T": (1, 49), "Hq": [4, 7, 8], "Hkv": [1, 3], "D": [64, 96, 128]}, count=2),
    ),
    dtypes=(torch.bfloat16, torch.float16),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    # The defaults hold: the fp32 math (two products and a sum) is accurate to ~1e-7 relative, and rounding
    # to the output dtype costs at most half an ulp (2^-9 for bf16, 2^-11 for fp16) inside rtol 1e-2 / 1e-3.
    tolerances=dict(DEFAULT_TOLERANCES),
    # Nothing to forbid: torch has no rope op (the reference itself is elementwise mul, sub and cat, which
    # a candidate may use too). Outside libraries' rotary kernels (flash-attn, vLLM) are not aten ops that
    # a profiler list could name.
    forbidden=(),
    description=(
        "Rotary position embedding, rotate-half (NeoX) style, as Llama-3 and DeepSeek-V3 apply it to the "
        "queries and keys of every attention layer: for each token t and head, with x1 = x[..., :D/2] and "
        "x2 = x[..., D/2:], out = cat(x1 * cos[t] - x2 * sin[t], x2 * cos[t] + x1 * sin[t]). q [T, Hq, D] "
        "and k [T, Hkv, D] are bf16 or fp16, cos and sin [T, D/2] are fp32 tables at arbitrary positions "
        "(shared by all heads); the math is fp32 and q_out, k_out are rounded once to q's dtype. Purely "
        "memory-bound: decode (T = 1 to 256) is launch-latency-bound, prefill (T = 4096 to 16384) should "
        "reach DRAM bandwidth. Any T, head counts and even D (including D/2 not a power of two) must work."
    ),
)
