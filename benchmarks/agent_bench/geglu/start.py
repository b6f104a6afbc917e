"""The plain-torch start: the reference's math at fp32, rounded once."""

import math

import torch


def kernel(x):
    half = x.shape[-1] // 2
    gate, up = x[:, :half].float(), x[:, half:].float()
    inner = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate * gate * gate)
    return (0.5 * gate * (1.0 + torch.tanh(inner)) * up).to(x.dtype)
