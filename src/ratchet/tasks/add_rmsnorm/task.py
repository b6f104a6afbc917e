"""Fused residual add + RMSNorm, as vLLM's fused_add_rms_norm (without its in-place writes).

new_residual = x + residual, rounded to x's dtype; out = rmsnorm(new_residual) * weight, with the mean of
squares and the scaling in fp32 from the rounded sum, and out rounded once to x's dtype.
"""

import torch

from ratchet.task import Cost, DEFAULT_TOLERANCES, Task, decode_weight, load_task, tensor_bytes


def reference(x, residual, weight, eps):
    # Computes in whatever dtype it is given (the judge hands it float64) and returns that dtype. In
    # float64 the sum is exact; a kernel that rounds it to bf16/fp16 first (as vLLM does, and as the next
    # layer sees it) differs by at most half an ulp of the dtype: see the tolerance note below.
    new_residual = x + residual
    variance = new_residual.pow(2).mean(dim=-1, keepdim=True)
    return new_residual * torch.rsqrt(variance + eps) * weight, new_residual


def make_inputs(shape, dtype, device, generator):
    T, H = shape["T"], shape["H"]
    # Rows of very different magnitude (log-uniform scale in [0.1, 10]), in x and in the residual
    # independently: a kernel that normalizes x or the residual alone, or by a global statistic, or
    # squares in fp16 (overflow), is wrong by a lot.
    x_scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0)
    r_scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0)
    x = torch.randn(T, H, generator=generator, device=device) * x_scale
    residual = torch.randn(T, H, generator=generator, device=device) * r_scale
    # Weight near 1 but varied per channel, so ignoring or misindexing it is visible.
    weight = 1.0 + 0.25 * torch.randn(H, generator=generator, device=device)
    # The two eps values real models use (Llama 1e-5 / 1e-6); drawn so a kernel cannot hard-code one.
    eps = (1e-6, 1e-5)[int(torch.randint(0, 2, (1,), generator=generator, device=device).item())]
    return x.to(dtype), residual.to(dtype), weight.to(dtype), eps


def cost(shape, dtype):
    T, H = shape["T"], shape["H"]
    # Read x, residual and weight once; write out and new_residual once. Per element: the add, the
    # square-accumulate (2) and two multiplies.
    moved = tensor_bytes((T, H), dtype) * 4 + tensor_bytes((H,), dtype)
    return Cost(bytes=moved, flops=5.0 * T * H)




_RMSNORM = load_task("rmsnorm")

TASK = Task(
    name="add_rmsnorm",
    reference=reference,
    make_inputs=make_inputs,
    # rmsnorm's shapes (real hidden sizes, decode and prefill T, odd held-out H). Largest public shape:
    # 16384 x 8192 bf16 moves 4 x 256 MiB = 1 GiB per call here.
    gpu=_RMSNORM.gpu,
    cpu=_RMSNORM.cpu,
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    # The defaults hold against the exact float64 reference. new_residual: one rounding of the exact sum
    # (bf16 + bf16 is exact in fp32), half an ulp = 2^-9 / 2^-11 relative for bf16 / fp16, inside
    # rtol 1e-2 / 1e-3. out: normalizing the rounded sum adds that half ulp per element (the rstd moves
    # far less: the roundings average over H), and rounding out adds another half ulp, so at most ~2^-8
    # (bf16) / ~2^-10 ≈ 9.8e-4 (fp16) relative, still inside atol + rtol * |ref| = 1e-3 + 1e-3 * |ref|.
    # Measured with the vLLM-style computation over 30,000 rows (H 17..1000): worst element at 0.76 of
    # the fp16 allowance, 0.60 of bf16's. A sum of squares held in fp16 overflows on the large rows and
    # fails (see the tests).
    tolerances=dict(DEFAULT_TOLERANCES),
    # What torch.profiler lists for torch.nn.functional.rms_norm (CPU: rms_norm -> _fused_rms_norm).
    forbidden=("aten::rms_norm", "aten::_fused_rms_norm"),
    description=(
        "Residual add fused with RMSNorm, as between the sublayers of every Llama- and DeepSeek-style "
        "decoder layer (vLLM's fused_add_rms_norm): for rows of x [T, H] and residual [T, H], "
        "new_residual = x + residual rounded to x's dtype, and out = new_residual * "
        "rsqrt(mean(new_residual^2) + eps) * weight, with the mean of squares and the scaling in fp32 "
        "and out rounded once to x's dtype (bf16, fp16 or fp32). Returns (out, new_residual) as new "
        "tensors; the inputs must not be modified. Purely memory-bound (read x, residual and weight, "
        "write out and new_residual), so the goal is DRAM bandwidth at prefill sizes and low launch and "
        "reduction latency for decode, where T is 1 to 256 rows. Any T and any H must work, including "
        "odd H; calling torch.nn.functional.rms_norm is forbidden."
    ),
)
