"""Residual add + RMSNorm in Triton: one program per row, one pass when the row fits in a block.

Each program loads its rows of x and residual, adds them in fp32, rounds the sum to the dtype and stores
it as new_residual, then reduces the squares of the rounded sum (what vLLM normalizes, and what the next
layer reads), scales and stores out: x and residual are read once, out and new_residual written once.
If the block covers the row (BLOCK_H == 0 means next_power_of_2(H)) the row stays in registers; a
narrower block walks the row twice, the second walk reading back the new_residual this same program
stored (one read instead of two; it mostly hits L2). Masked loads make any H work; row offsets are int64
because T * H passes 2^31 at long prefill.
HINTS (on by default) loads x, residual and the weight evict_last, as Inductor does for rmsnorm (see
rmsnorm's triton_rowwise.py). On the H200 (2026-11-30, cache hints, the judge's L2 flush, a probe script;
docs/results/2026-11-30-add-rmsnorm-largest-peers.md), bf16: T=16384 H=4096 125.2 us with
hints against 130.0 without (torch.compile 133.1); H=8192 250.0 against 259.2 (torch.compile 262.8);
decode shapes (T=1, 256) unchanged within 0.2 us. num_warps 0 picks 16 from H = 8192 up, 8 below.
"""

import triton
import triton.language as tl

from ratchet.tasks.add_rmsnorm.seeds._operands import operands

SPACE = {"BLOCK_H": [0, 1024, 2048, 4096], "num_warps": [0, 8, 4, 16], "HINTS": [1, 0]}


@triton.jit
def _add_rmsnorm_rows(x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, stride_x, stride_r, stride_out, stride_res,
                      H, eps, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = r_ptr + row * stride_r
    out_row = out_ptr + row * stride_out
    res_row = res_ptr + row * stride_res
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        r = tl.load(r_row + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        s = (x + r).to(res_ptr.dtype.element_ty)  # rounded once, as stored
        tl.store(res_row + cols, s, mask=mask)
        s = s.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / H + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        tl.store(out_row + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)  # per-lane partial sums, reduced once at the end
        for start in range(0, H, BLOCK):
            mask = start + cols < H
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            r = tl.load(r_row + start + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            s = (x + r).to(res_ptr.dtype.element_ty)
            tl.store(res_row + start + cols, s, mask=mask)
            s = s.to(tl.float32)
            acc += s * s
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            mask = start + cols < H
            # Same layout as the store above, so each thread reads back what it wrote itself.
            s = tl.load(res_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            tl.store(out_row + start + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def kernel(x, residual, weight, eps, BLOCK_H=0, num_warps=0, HINTS=1):
    x, residual, weight, out, new_residual = operands(x, residual, weight)
    T, H = x.shape
    block = BLOCK_H or triton.next_power_of_2(H)
    block = min(block, triton.next_power_of_2(H))  # a chunk wider than the row only wastes lanes
    if T > 0:
        _add_rmsnorm_rows[(T,)](x, residual, weight, out, new_residual,
                                x.stride(0), residual.stride(0), out.stride(0), new_residual.stride(0),
                                H, float(eps), BLOCK=block, ONE_PASS=block >= H,
                                # evict_last: the weight, re-read by every row, stays in L2 while rows stream by
                                EVICT="evict_last" if HINTS else "",
                                num_warps=num_warps or (16 if H >= 8192 else 8))
    return out, new_residual
