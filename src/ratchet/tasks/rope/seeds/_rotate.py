"""What the rope Triton seeds share (a helper, not a seed: files named with a leading underscore are not
candidates): the operands with unit stride in the last dim and their outputs, and the rotate-half rotation
of a block of one token's heads, in fp32."""

import torch
import triton
import triton.language as tl


@triton.jit
def rotate_heads(x_ptr, o_ptr, stride_xh, stride_oh, H, HALF, c, s, h0,
                 BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rotate heads h0 .. h0 + BLOCK_H of one token; c and s are the token's fp32 [BLOCK_D] rows."""
    heads = h0 + tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    mask = (heads < H)[:, None] & (dims < HALF)[None, :]
    x1_ptrs = x_ptr + heads[:, None] * stride_xh + dims[None, :]
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    o1_ptrs = o_ptr + heads[:, None] * stride_oh + dims[None, :]
    tl.store(o1_ptrs, (x1 * c[None, :] - x2 * s[None, :]).to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(o1_ptrs + HALF, (x2 * c[None, :] + x1 * s[None, :]).to(o_ptr.dtype.element_ty), mask=mask)


def operands(q, k, cos, sin):
    """q, k, cos and sin with unit stride in the last dim (the kernels walk tokens and heads by their
    strides, so q and k may be views of a fused qkv projection), and empty outputs shaped as q and k."""
    q, k, cos, sin = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, cos, sin))
    return q, k, cos, sin, torch.empty_like(q), torch.empty_like(k)
