"""A Qwen3-MoE layer's routed experts at decode sizes (Qwen3-30B-A3B: 128 experts, top-8, hidden 2048,
moe_intermediate 768), given the router's choice: the grouped GEMMs of vLLM's fused_moe.

For x [T, H], w13 [E, 2I, H] (gate rows then up rows of each expert), w2 [E, H, I], topk_ids [T, K]
int64 and topk_weights [T, K] fp32: out[t] = sum_k topk_weights[t, k] * w2[e] @ (silu(g) * u), where
e = topk_ids[t, k] and (g, u) = split(w13[e] @ x[t]). bf16 weights and activations, fp32 accumulation.
"""

import math

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, tensor_bytes


def reference(x, w13, w2, topk_ids, topk_weights):
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.zeros(T, H, dtype=wide, device=x.device)
    for e in topk_ids.unique().tolist():  # only the experts the router chose
        rows, slot = (topk_ids == e).nonzero(as_tuple=True)
        gate_up = x[rows].to(wide) @ w13[e].to(wide).t()
        h = torch.nn.functional.silu(gate_up[:, :I]) * gate_up[:, I:]
        out.index_add_(0, rows, (h @ w2[e].to(wide).t()) * topk_weights[rows, slot].to(wide)[:, None])
    return out.to(x.dtype)


def make_inputs(shape, dtype, device, generator):
    """Weights scaled 1/sqrt(fan-in) so every stage is O(1); each token's K distinct experts drawn
    uniformly (a trained router spreads decode tokens over most experts), weights softmax-normalized over
    the K as Qwen3 does (norm_topk_prob)."""
    T, H, I, E, K = shape["T"], shape["H"], shape["I"], shape["E"], shape["K"]
    x = torch.randn(T, H, generator=generator, device=device)
    w13 = torch.randn(E, 2 * I, H, generator=generator, device=device) / math.sqrt(H)
    w2 = torch.randn(E, H, I, generator=generator, device=device) / math.sqrt(I)
    ids = torch.rand(T, E, generator=generator, device=device).argsort(dim=-1)[:, :K]
    weights = torch.softmax(torch.randn(T, K, generator=generator, device=device), dim=-1)
    return x.to(dtype), w13.to(dtype), w2.to(dtype), ids.to(torch.int64), weights.to(torch.float32)


def _experts_touched(T, E, K):
    """A lower bound on the distinct experts T tokens reach: 0.9 of the expectation E (1 - (1 - K/E)^T),
    at least K (one token reaches K)."""
    return max(K, 0.9 * E * (1.0 - (1.0 - K / E) ** T))


def cost(shape, dtype):
    T, H, I, E, K = shape["T"], shape["H"], shape["I"], shape["E"], shape["K"]
    # Decode is weight-bound: every chosen expert's w13 and w2 are read once; activations are small.
    weights = _experts_touched(T, E, K) * tensor_bytes((3 * I, H), dtype)
    acts = tensor_bytes((T, H), dtype) * 2 + T * K * 12
    return Cost(bytes=weights + acts, flops=2.0 * T * K * 3 * I * H)


_QWEN3_30B = {"H": 2048, "I": 768, "E": 128, "K": 8}

TASK = Task(
    name="qwen3_moe_experts",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"T": t, **_QWEN3_30B} for t in (1, 4, 16, 64, 256)],
        held_out=ShapeRange(dims={"T": (1, 300), "H": [2048], "I": [768], "E": [128], "K": [8]}),
    ),
    cpu=ShapeSet(
        public=[{"T": 1, "H": 64, "I": 48, "E": 8, "K": 2}, {"T": 8, "H": 64, "I": 48, "E": 8, "K": 2}],
        held_out=ShapeRange(dims={"T": (1, 12), "H": [64, 96], "I": [48, 40], "E": [8, 6], "K": [2, 3]}),
    ),
    dtypes=(torch.bfloat16,),
    cost=cost,
    weight=lambda shape: 1.0,
    # The reference is computed in fp32 (an fp64 copy of 128 experts' weights would be 2.4 GB more per
    # check). Kernels round the intermediate silu(g) * u to bf16 before the down GEMM, as vLLM does:
    # 2^-9 relative per element, averaging out over I; the output's own bf16 rounding is 2^-9.
    reference_dtype=torch.float32,
    tolerances={torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2)},
    description=(
        "The routed experts of a Qwen3-MoE layer at decode sizes (Qwen3-30B-A3B: E=128 experts, top K=8, "
        "hidden H=2048, moe_intermediate I=768; vLLM's fused_moe without the router): x [T, H] bf16, w13 "
        "[E, 2I, H] bf16 (gate rows 0..I-1, up rows I..2I-1), w2 [E, H, I] bf16, topk_ids [T, K] int64 "
        "(distinct per token), topk_weights [T, K] fp32. out [T, H] bf16 = sum over k of topk_weights[t, k] "
        "* w2[e] @ (silu(gate) * up) with e = topk_ids[t, k], (gate, up) = w13[e] @ x[t]; fp32 accumulation. "
        "At decode sizes the work is reading the chosen experts' weights once (T=64 reaches most of the 128 "
        "experts): a grouped GEMM that reads each expert once for all its tokens wins."
    ),
)
