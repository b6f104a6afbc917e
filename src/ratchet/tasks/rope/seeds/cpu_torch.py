"""RoPE in plain torch, fp32 math, tokens in chunks so the fp32 temporaries stay in cache.

Each half is computed with one multiply and one fused multiply-add (addcmul) into an fp32 buffer per
chunk, then rounded once into the output. CHUNK == 0 means all tokens at once.
"""

import torch

SPACE = {"CHUNK": [64, 16, 256, 0]}


def _rotate(x, cos, sin, chunk):
    T, _, D = x.shape
    half = D // 2
    out = torch.empty_like(x)
    step = chunk or max(T, 1)
    for start in range(0, T, step):
        stop = start + step
        xf = x[start:stop].to(torch.float32)  # a new tensor for bf16/fp16: never written in place
        x1, x2 = xf[..., :half], xf[..., half:]
        c = cos[start:stop].to(torch.float32).unsqueeze(1)  # [t, 1, D/2]: broadcast over heads
        s = sin[start:stop].to(torch.float32).unsqueeze(1)
        rotated = torch.empty_like(xf)
        torch.mul(x1, c, out=rotated[..., :half]).addcmul_(x2, s, value=-1.0)
        torch.mul(x2, c, out=rotated[..., half:]).addcmul_(x1, s)
        out[start:stop].copy_(rotated)
    return out


def kernel(q, k, cos, sin, CHUNK=64):
    return _rotate(q, cos, sin, CHUNK), _rotate(k, cos, sin, CHUNK)
