"""RMSNorm in Triton: one program per row, fp32 accumulation, masked loads so any H works.

If the chunk covers the row (BLOCK_H == 0 means next_power_of_2(H)), the row stays in registers and x
is read from DRAM once. Otherwise the row is walked twice in BLOCK_H chunks: sum of squares, then
scale and store (the second read of a row mostly hits L2).
Measured on one H200, 2026-11-29, torch 2.11 / triton 3.6, bf16, with triton.testing.do_bench in a
developer's ad-hoc script (not yet through `ratchet eval`; see docs/NOTES.md): [16384, 8192] 136 us
= 3.95 TB/s, [4096, 4096] 22 us; decode shapes (T <= 256) 5-8 us, launch-bound. torch's fused
rms_norm took 203 / 27 / 11-18 us in the same script.
HINTS (Inductor's choice, read from its generated kernel on the H200, 2026-11-30): x and the weight are
loaded evict_last. With the judge's L2 flush before every call (a probe script;
docs/results/2026-11-30-largest-shapes-peers.md), bf16: T=16384 H=4096 62.7 us
with hints against 64.7-65.2 without (torch.compile 71.0); H=8192 124.0-124.6 at 16 warps against 128.5
(torch.compile 124.0-124.1). Reading x a second time after the reduction, as Inductor also does, changed
nothing (124.1 at 16 warps). Judged by benchmarks/suite.py: 62.7 and 124.3 us (torch.compile 71.5 and 124.1).
num_warps 0 picks by width: 16 from H = 8192 up (8 warps there: 124.9-126.5 us), 8 below (16 warps at
H = 4096: 72 us).
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK_H": [0, 1024, 2048, 4096], "num_warps": [0, 8, 4, 16], "HINTS": [1, 0]}


@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, out_ptr, stride_x, stride_out, H, eps,
                  BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: T * H can pass 2^31 at long prefill
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        tl.store(out_row + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)  # per-lane partial sums, reduced once at the end
        for start in range(0, H, BLOCK):
            mask = start + cols < H
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            mask = start + cols < H
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            tl.store(out_row + start + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def kernel(x, weight, eps, BLOCK_H=0, num_warps=0, HINTS=1):
    if x.stride(-1) != 1:  # the kernel walks columns with unit stride
        x = x.contiguous()
    weight = weight.contiguous()
    T, H = x.shape
    out = torch.empty_like(x)
    block = BLOCK_H or triton.next_power_of_2(H)
    block = min(block, triton.next_power_of_2(H))  # a chunk wider than the row only wastes lanes
    warps = num_warps or (16 if H >= 8192 else 8)
    if T > 0:
        _rmsnorm_rows[(T,)](x, weight, out, x.stride(0), out.stride(0), H, float(eps),
                            BLOCK=block, ONE_PASS=block >= H, num_warps=warps,
                            # evict_last: the weight, re-read by every row, stays in L2 while x streams by
                            EVICT="evict_last" if HINTS else "")
    return out
