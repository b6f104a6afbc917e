"""RoPE in Triton: one program per token rotates all its q and k heads, fp32 math.

The token's cos and sin rows are loaded once and reused for every head of q and k; heads go through in
tiles of BLOCK_H heads x D/2 (BLOCK_H == 0: all heads of a tensor in one tile), each tile loading both
halves and storing both rotated halves. Masks on heads and on D/2 make any head count and any even D
work (D = 96 gives a half of 48, padded to 64 lanes). Strides are passed, so q and k may be views of a
fused qkv projection as long as the last dim is contiguous.
Not yet measured on a GPU.
"""

import triton
import triton.language as tl

from ratchet.tasks.rope.seeds._rotate import operands, rotate_heads

SPACE = {"BLOCK_H": [0, 8, 32], "num_warps": [4, 1, 2, 8]}


@triton.jit
def _rope_token(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
                sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, sc_t, ss_t, HQ, HK, HALF,
                BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)  # int64: T * H * D can pass 2^31 at long prefill
    dims = tl.arange(0, BLOCK_D)
    c = tl.load(cos_ptr + t * sc_t + dims, mask=dims < HALF, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + t * ss_t + dims, mask=dims < HALF, other=0.0).to(tl.float32)
    for h0 in range(0, HQ, BLOCK_HQ):
        rotate_heads(q_ptr + t * sq_t, qo_ptr + t * sqo_t, sq_h, sqo_h, HQ, HALF, c, s, h0,
                     BLOCK_H=BLOCK_HQ, BLOCK_D=BLOCK_D)
    for h0 in range(0, HK, BLOCK_HK):
        rotate_heads(k_ptr + t * sk_t, ko_ptr + t * sko_t, sk_h, sko_h, HK, HALF, c, s, h0,
                     BLOCK_H=BLOCK_HK, BLOCK_D=BLOCK_D)


def kernel(q, k, cos, sin, BLOCK_H=0, num_warps=4):
    q, k, cos, sin, q_out, k_out = operands(q, k, cos, sin)
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    block_hq = min(BLOCK_H or triton.next_power_of_2(Hq), triton.next_power_of_2(Hq))
    block_hk = min(BLOCK_H or triton.next_power_of_2(Hkv), triton.next_power_of_2(Hkv))
    if T > 0:
        _rope_token[(T,)](q, k, cos, sin, q_out, k_out,
                          q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                          q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
                          cos.stride(0), sin.stride(0), Hq, Hkv, D // 2,
                          BLOCK_HQ=block_hq, BLOCK_HK=block_hk, BLOCK_D=triton.next_power_of_2(D // 2),
                          num_warps=num_warps)
    return q_out, k_out
