"""Peer for the rope task: Liger-Kernel's rotate-half RoPE, as benchmarks/suite.py judges it.

Layouts: Liger takes q [B, Hq, T, D] and k [B, Hkv, T, D] that are transposed views of contiguous
[B, T, H, D] tensors, so the task's q [T, Hq, D] is passed as q.unsqueeze(0).transpose(1, 2), with no
copy. cos and sin stay [T, D/2] fp32: with rotary_dim=D Liger reads half-width tables (its GPT-OSS
path) instead of the duplicated [T, D] ones; the math is fp32, stored once to q's dtype.

Liger rotates q and k in place. The task returns new tensors and the judge refuses a kernel that
changes its inputs, so q and k are copied first: the copy is part of this peer's time (about twice
the memory traffic of the op itself). In a model, where q and k are temporaries, the in-place form
saves that copy; the table's note says so.
"""

from liger_kernel.ops import LigerRopeFunction


def kernel(q, k, cos, sin):
    q_out, k_out = q.clone(), k.clone()
    LigerRopeFunction.apply(q_out.unsqueeze(0).transpose(1, 2), k_out.unsqueeze(0).transpose(1, 2), cos, sin,
                            None, 1, q.shape[-1])
    return q_out, k_out
