"""SiLU-and-multiply in Triton over the flattened output: a 1D grid, row and column found per element.

A different idea from the 2D grid: output element e (of T * I) sits at row e // I, column e % I, so each
program covers BLOCK consecutive output elements whatever the row boundaries. No program is a partial
row tail (with odd I or I % BLOCK != 0 the 2D grid leaves a half-empty block in every row), and a
decode call with a small I still spreads over many programs. The price is an integer divide per
element, hidden behind memory in this memory-bound op, and loads that Triton's alignment analysis can
no longer prove contiguous (the output is written at the flat offset itself, so stores stay
vectorized): whether that costs bandwidth is for the measurement to say. Offsets are int64: T * 2I passes 2^31 elements
at long prefill with the largest I.
"""

import torch
import triton
import triton.language as tl

SPACE = {"BLOCK": [2048, 1024, 4096, 512], "num_warps": [8, 4, 16]}


@triton.jit
def _silu_mul_flat(x_ptr, out_ptr, stride_x, I, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    row = offs // I
    col = offs - row * I
    gate_ptr = x_ptr + row * stride_x + col
    gate = tl.load(gate_ptr, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptr + I, mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def kernel(x, BLOCK=2048, num_warps=8):
    if x.stride(-1) != 1:  # columns are addressed with unit stride
        x = x.contiguous()
    T, two_i = x.shape
    half = two_i // 2
    out = torch.empty((T, half), dtype=x.dtype, device=x.device)  # contiguous: element e at offset e
    n = T * half
    if n > 0:
        _silu_mul_flat[(triton.cdiv(n, BLOCK),)](x, out, x.stride(0), half, n,
                                                 BLOCK=BLOCK, num_warps=num_warps)
    return out
