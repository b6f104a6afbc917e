"""RoPE in Triton over a 2-D grid: (token, block of heads), q's head blocks and k's in one launch.

The idea: at decode (T = 1 to 256) one program per token leaves most SMs idle (T = 1 is one program
for 32 + 8 heads); splitting the heads into blocks of BLOCK_H gives T * (cdiv(Hq, BLOCK_H) +
cdiv(Hkv, BLOCK_H)) small programs, each loading the token's cos/sin rows (from L2 after the first)
and rotating its heads in fp32. Programs whose head-block index is past q's blocks take k's heads.
Masks on heads and D/2 make any head count and any even D work.
Not yet measured on a GPU.
"""

import triton
import triton.language as tl

from ratchet.tasks.rope.seeds._rotate import operands, rotate_heads

SPACE = {"BLOCK_H": [4, 1, 8, 16], "num_warps": [2, 1, 4]}


@triton.jit
def _rope_head_block(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
                     sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, sc_t, ss_t, HQ, HK, HALF, Q_BLOCKS,
                     BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)  # int64: T * H * D can pass 2^31 at long prefill
    block = tl.program_id(1)
    dims = tl.arange(0, BLOCK_D)
    c = tl.load(cos_ptr + t * sc_t + dims, mask=dims < HALF, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + t * ss_t + dims, mask=dims < HALF, other=0.0).to(tl.float32)
    if block < Q_BLOCKS:
        rotate_heads(q_ptr + t * sq_t, qo_ptr + t * sqo_t, sq_h, sqo_h, HQ, HALF, c, s, block * BLOCK_H,
                     BLOCK_H=BLOCK_H, BLOCK_D=BLOCK_D)
    else:
        rotate_heads(k_ptr + t * sk_t, ko_ptr + t * sko_t, sk_h, sko_h, HK, HALF, c, s,
                     (block - Q_BLOCKS) * BLOCK_H, BLOCK_H=BLOCK_H, BLOCK_D=BLOCK_D)


def kernel(q, k, cos, sin, BLOCK_H=4, num_warps=2):
    q, k, cos, sin, q_out, k_out = operands(q, k, cos, sin)
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    q_blocks, k_blocks = triton.cdiv(Hq, BLOCK_H), triton.cdiv(Hkv, BLOCK_H)
    if T > 0 and q_blocks + k_blocks > 0:
        _rope_head_block[(T, q_blocks + k_blocks)](
            q, k, cos, sin, q_out, k_out,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
            cos.stride(0), sin.stride(0), Hq, Hkv, D // 2, q_blocks,
            BLOCK_H=BLOCK_H, BLOCK_D=triton.next_power_of_2(D // 2), num_warps=num_warps)
    return q_out, k_out
