"""What the Triton decode-attention seeds share (a helper, not a seed: files named with a leading underscore
are not candidates): the head dim in two power-of-two parts, and the EMULATE helpers.

On the CPU (Triton's interpreter, for tests) two things differ from a GPU: the interpreter multiplies the
raw bits of bf16 operands in tl.dot and truncates fp32 -> bf16 casts. With EMULATE the operands are fp32
carrying exactly the bf16 values a GPU would use (rounded to nearest even by hand) and the dot is an exact
fp32 one: the same numbers as on the GPU.
"""

import os

import triton
import triton.language as tl


def head_parts(D):
    """The head dim as two power-of-two parts (BLOCK_DA <= D, BLOCK_DB >= the rest, 0 if none; 16 at
    least, the least tl.dot takes): 128 -> (128, 0), 96 -> (64, 32), 576 -> (512, 64)."""
    block_da = max(16, 1 << (D.bit_length() - 1))
    rest = D - block_da
    return block_da, (max(16, triton.next_power_of_2(rest)) if rest > 0 else 0)


def floor_pow2(n):
    return 1 << (max(1, n).bit_length() - 1)


def interpreted():
    """The Triton interpreter runs the kernels (the CPU tests): the EMULATE helpers make it compute what the
    GPU does. Not the tensors' device: a compile for sm_90 on a CPU-only machine (tests/hopper_compile.py)
    holds CPU tensors and must compile the GPU's code."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _round_bf16(x):
    """fp32 -> the nearest bf16 value (ties to even), still as fp32: the interpreter's own cast truncates."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def bf16(x, EMULATE: tl.constexpr):
    """x rounded to bf16: a bf16 tensor on the GPU, fp32 holding the same values in the interpreter."""
    if EMULATE:
        y = _round_bf16(x)
    else:
        y = x.to(tl.bfloat16)
    return y


@triton.jit
def dot(a, b, EMULATE: tl.constexpr):
    """a @ b with an fp32 result: tensor cores on the GPU, an exact fp32 product in the interpreter."""
    if EMULATE:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        c = tl.dot(a, b)
    return c
