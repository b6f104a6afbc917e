"""Fused residual add + RMSNorm + dynamic per-token FP8 (e4m3) quantization, as in FP8 serving stacks
(vLLM's rms_norm_dynamic_per_token_quant with a residual).

new_residual = x + residual (rounded to x's dtype); y = new_residual * rsqrt(mean(new_residual^2) + eps)
* weight in fp32; per token, scale = max(|y|) / 448 (floored at _MIN_SCALE) and
q = round_to_e4m3(y / scale). Returns (q [T, H] float8_e4m3fn, scale [T, 1] fp32, new_residual [T, H]).

The rule: the dequantized q * scale must match the exact y within what one e4m3 rounding allows
(2^-4 relative, one subnormal step of 2^-9 absolute in units of the scale) plus the input dtype's
rounding of new_residual; the scale must match the exact one within that dtype's tolerance; new_residual
within the dtype's tolerance table.
"""

import torch

from ratchet.task import Cost, DEFAULT_TOLERANCES, Task, decode_weight, load_task, tensor_bytes

FP8_MAX = 448.0  # largest finite float8_e4m3fn
_MIN_SCALE = 1e-12  # a row of zeros would divide by zero; servers floor the scale
_E4M3_HALF_ULP = 2.0 ** -4  # round to nearest with 3 mantissa bits: at most half an ulp, 2^-4 of the value
_E4M3_SUBNORMAL_STEP = 2.0 ** -9


def _normed(x, residual, weight, eps):
    new_residual = x + residual
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    r = new_residual.to(wide)
    y = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(wide)
    return y, new_residual


def reference(x, residual, weight, eps):
    y, new_residual = _normed(x, residual, weight, eps)
    scale = (y.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=_MIN_SCALE)
    q = (y / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.to(torch.float32), new_residual


def make_inputs(shape, dtype, device, generator):
    # add_rmsnorm's inputs: rows of very different magnitude in x and residual, weights near 1.
    T, H = shape["T"], shape["H"]
    x_scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0)
    r_scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0)
    x = torch.randn(T, H, generator=generator, device=device) * x_scale
    residual = torch.randn(T, H, generator=generator, device=device) * r_scale
    weight = 1.0 + 0.25 * torch.randn(H, generator=generator, device=device)
    eps = (1e-6, 1e-5)[int(torch.randint(0, 2, (1,), generator=generator, device=device).item())]
    return x.to(dtype), residual.to(dtype), weight.to(dtype), eps


def check(inputs, outputs, refs, dtype):
    """Each row's scale (max |y| / 448) within the dtype's tolerance of the reference's; q * scale within
    one e4m3 rounding of the exact float64 value (plus the input dtype's roundings); the new residual within
    the dtype's tolerance."""
    x, residual, weight, eps = inputs
    q, scale, new_residual = outputs
    _, ref_scale, ref_residual = refs
    exact, _ = _normed(x.to(torch.float64), residual.to(torch.float64), weight.to(torch.float64), eps)
    tol = DEFAULT_TOLERANCES[dtype]
    failures = []
    s = scale.to(torch.float64)
    bad_scale = (s - ref_scale.to(torch.float64)).abs() > tol.atol * 1e-3 + tol.rtol * ref_scale.to(torch.float64)
    if bad_scale.any():
        row = int(bad_scale.flatten().nonzero()[0])
        failures.append(f"{int(bad_scale.sum())} of {s.numel()} scales wrong; row {row}: got {s.flatten()[row]:.6g}, "
                        f"expected {float(ref_scale.flatten()[row]):.6g} (max|y| / 448)")
        return failures
    deq = q.to(torch.float64) * s
    # One e4m3 rounding, plus the input dtype's rounding of new_residual (the kernel normalizes the rounded
    # sum, the exact y does not) and of the weight's product.
    allowed = (_E4M3_HALF_ULP + 2 * tol.rtol) * exact.abs() + s * _E4M3_SUBNORMAL_STEP * 1.01
    bad = ~torch.isfinite(deq) | ((deq - exact).abs() > allowed)
    if bad.any():
        worst = int(torch.argmax(torch.where(bad, (deq - exact).abs() - allowed, torch.zeros_like(deq))))
        failures.append(f"{int(bad.sum())} of {deq.numel()} dequantized values q * scale beyond one e4m3 rounding "
                        f"of the exact value; worst at flat index {worst}: got {float(deq.flatten()[worst]):.6g}, "
                        f"expected {float(exact.flatten()[worst]):.6g}")
    r_out, r_ref = new_residual.to(torch.float64), ref_residual.to(torch.float64)
    bad_r = (r_out - r_ref).abs() > tol.atol + tol.rtol * r_ref.abs()
    if bad_r.any():
        failures.append(f"new_residual: {int(bad_r.sum())} of {r_ref.numel()} elements beyond atol={tol.atol:g} "
                        f"rtol={tol.rtol:g}")
    return failures


def cost(shape, dtype):
    T, H = shape["T"], shape["H"]
    # Read x, residual and weight; write new_residual (x's dtype), q (1 byte) and the scales.
    moved = 3 * tensor_bytes((T, H), dtype) + tensor_bytes((H,), dtype) + T * H + 4 * T
    return Cost(bytes=moved, flops=8.0 * T * H)


_RMSNORM = load_task("rmsnorm")

TASK = Task(
    name="add_rmsnorm_fp8",
    reference=reference,
    make_inputs=make_inputs,
    gpu=_RMSNORM.gpu,  # real hidden sizes (4096, 7168, 8192), decode and prefill T, odd held-out H
    cpu=_RMSNORM.cpu,
    dtypes=(torch.bfloat16, torch.float16),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    check=check,
    forbidden=("aten::rms_norm", "aten::_fused_rms_norm"),
    description=(
        "Residual add + RMSNorm + dynamic per-token FP8 quantization, fused (the input of an FP8 GEMM in "
        "FP8 serving of Llama-3 and DeepSeek-V3): for x, residual [T, H] (bf16 or fp16) and weight [H], "
        "new_residual = x + residual in x's dtype; y = new_residual * rsqrt(mean(new_residual^2) + eps) * "
        "weight in fp32; per row, scale = max(|y|) / 448 (floored at 1e-12) and q = y / scale rounded to "
        "float8_e4m3fn (round to nearest). Returns (q [T, H] float8_e4m3fn, scale [T, 1] fp32, new_residual "
        "[T, H]) as new tensors. Judged on q * scale against the exact y (one e4m3 rounding allowed), the "
        "scales and new_residual within the dtype's tolerance. Memory-bound: 2 + 2 bytes in, 2 + 1 out per "
        "element; torch.nn.functional.rms_norm is forbidden."
    ),
)
