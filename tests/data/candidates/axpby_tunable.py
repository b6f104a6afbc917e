"""An honest axpby with a SPACE of 8 configs, for the loop's tests."""

import torch

SPACE = {"CHUNK": [0, 64, 256, 1024], "ORDER": ["xy", "yx"]}


def kernel(x, y, a, CHUNK=0, ORDER="xy"):
    out = torch.empty_like(x)
    step = CHUNK or x.numel()
    for start in range(0, x.numel(), step):
        xs, ys = x[start:start + step], y[start:start + step]
        if ORDER == "xy":
            out[start:start + step] = a * xs + ys
        else:
            out[start:start + step] = ys + a * xs
    return out
