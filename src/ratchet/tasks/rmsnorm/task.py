"""RMSNorm: out = x * rsqrt(mean(x^2, last dim) + eps) * weight, math in fp32, output in x's dtype."""

import torch

from ratchet.task import (
    Cost, DEFAULT_TOLERANCES, LLM_HIDDEN_SIZES, ShapeRange, ShapeSet, Task, decode_weight, tensor_bytes,
)


def reference(x, weight, eps):
    # Computes in whatever dtype it is given (the judge hands it float64) and returns that dtype.
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def make_inputs(shape, dtype, device, generator):
    T, H = shape["T"], shape["H"]
    # Rows of very different magnitude (log-uniform scale in [0.1, 10]): a kernel that normalizes by the
    # wrong row, or by a global statistic, is wrong by a lot; fp16 squares summed in fp16 overflow.
    scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0)
    x = torch.randn(T, H, generator=generator, device=device) * scale
    # Weight near 1 but varied per channel, so ignoring or misindexing it is visible.
    weight = 1.0 + 0.25 * torch.randn(H, generator=generator, device=device)
    # The two eps values real models use (Llama 1e-5 / 1e-6); drawn so a kernel cannot hard-code one.
    eps = (1e-6, 1e-5)[int(torch.randint(0, 2, (1,), generator=generator, device=device).item())]
    return x.to(dtype), weight.to(dtype), eps


def cost(shape, dtype):
    T, H = shape["T"], shape["H"]
    # Read x and weight once, write out once; square, add, and two multiplies per element.
    moved = tensor_bytes((T, H), dtype) * 2 + tensor_bytes((H,), dtype)
    return Cost(bytes=moved, flops=4.0 * T * H)




TASK = Task(
    name="rmsnorm",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"T": t, "H": h} for h in LLM_HIDDEN_SIZES for t in (1, 64, 256, 4096)]
        + [{"T": 16384, "H": 4096}, {"T": 16384, "H": 8192}],
        # Any token count up to the longest prefill chunk; 2880 (gpt-oss) and 3003 are not powers of
        # two, and 3003 is odd, so a kernel that assumes H % 8 == 0 or a power-of-two H fails.
        held_out=ShapeRange(dims={"T": (1, 20000), "H": [4096, 5120, 7168, 8192, 2880, 3003]}, count=2),
    ),
    cpu=ShapeSet(
        public=[
            {"T": 1, "H": 1000},
            {"T": 7, "H": 256},
            {"T": 64, "H": 64},
            {"T": 7, "H": 1000},
            {"T": 64, "H": 1000},
        ],
        held_out=ShapeRange(dims={"T": (1, 100), "H": (17, 700)}, count=2),
    ),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    # The defaults hold: the fp32 math is accurate to ~1e-6, and rounding the output to its dtype costs
    # at most half an ulp (2^-9 relative for bf16, 2^-11 for fp16), well inside rtol 1e-2 / 1e-3.
    tolerances=dict(DEFAULT_TOLERANCES),
    # What torch.profiler lists for torch.nn.functional.rms_norm (CPU: rms_norm -> _fused_rms_norm).
    forbidden=("aten::rms_norm", "aten::_fused_rms_norm"),
    description=(
        "RMSNorm over the hidden dimension, as in every Llama- and DeepSeek-style decoder layer: for each "
        "row of x [T, H], out = x * rsqrt(mean(x^2) + eps) * weight, with the mean of squares and the "
        "scaling done in fp32 and the result rounded once to x's dtype (bf16, fp16 or fp32). It is purely "
        "memory-bound (read x and weight, write out), so the goal is to reach DRAM bandwidth at prefill "
        "sizes and to keep launch and reduction latency low for decode, where T is 1 to 256 rows. Any T "
        "and any H must work, including odd H; calling torch.nn.functional.rms_norm is forbidden."
    ),
)
