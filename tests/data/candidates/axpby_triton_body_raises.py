"""A Triton kernel whose body fails under the interpreter (a reshape to a size the block does not have):
the interpreter raises from the launch line, with the body's line only in the error it wraps."""
import torch
import triton
import triton.language as tl


@triton.jit
def _axpby(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    wrong = tl.reshape(x, (BLOCK + 1,))
    tl.store(out_ptr + offs, wrong, mask=mask)


def kernel(x, y, a):
    out = torch.empty_like(x)
    _axpby[(triton.cdiv(x.numel(), 256),)](x, y, out, a, x.numel(), BLOCK=256)
    return out
