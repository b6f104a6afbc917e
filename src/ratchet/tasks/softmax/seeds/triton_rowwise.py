"""Softmax in Triton: one program per row, fp32 math, masked loads so any N works.

If the chunk covers the row (BLOCK_N == 0 means next_power_of_2(N), up to 16384 elements: the attention
rows), the row stays in registers and x is read from DRAM once. Otherwise the row is walked three times
in BLOCK_N chunks: max, sum of exp(x - max), then scale and store; BLOCK_N == 0 on a vocabulary row
means chunks of 4096. The later reads of a row mostly hit L2, but one program per row leaves most of
the GPU idle at small batches: that is what triton_online.py is about.
Not yet measured on a GPU.
"""

import triton
import triton.language as tl

from ratchet.tasks.softmax.seeds._rows import operands

SPACE = {"BLOCK_N": [0, 4096, 8192, 16384], "num_warps": [8, 4, 16]}

_MAX_ONE_PASS = 16384  # widest row held in registers by default: 64 KB of fp32 per program
_LOOP_BLOCK = 4096     # default chunk for wider rows


@triton.jit
def _softmax_rows(x_ptr, out_ptr, stride_x, stride_out, N,
                  BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: M * N can pass 2^31
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))  # masked lanes: exp(-inf) = 0, out of the sum
        out = e / tl.sum(e, axis=0)
        tl.store(out_row + cols, out.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # Per-lane partials, reduced once per pass.
        acc_max = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            acc_max = tl.maximum(acc_max, x)
        row_max = tl.max(acc_max, axis=0)
        acc_sum = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            acc_sum += tl.exp(x - row_max)
        inv_sum = 1.0 / tl.sum(acc_sum, axis=0)
        for start in range(0, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            out = tl.exp(x - row_max) * inv_sum
            tl.store(out_row + start + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def kernel(x, BLOCK_N=0, num_warps=8):
    x, out = operands(x)
    M, N = x.shape
    width = triton.next_power_of_2(max(N, 1))
    if BLOCK_N:
        block = min(BLOCK_N, width)  # a chunk wider than the row only wastes lanes
    else:
        block = width if width <= _MAX_ONE_PASS else _LOOP_BLOCK
    if M > 0 and N > 0:
        _softmax_rows[(M,)](x, out, x.stride(0), out.stride(0), N,
                            BLOCK=block, ONE_PASS=block >= N, num_warps=num_warps)
    return out
