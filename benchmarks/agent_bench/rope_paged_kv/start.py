"""The plain-torch start: rotate the keys in fp32, clone the caches, scatter the valid slots."""

import torch


def kernel(key, value, cos, sin, k_cache, v_cache, slot_mapping):
    half = key.shape[-1] // 2
    k = key.float()
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    rotated = torch.cat((k[..., :half] * c - k[..., half:] * s, k[..., half:] * c + k[..., :half] * s), dim=-1)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    k_out, v_out = k_cache.clone(), v_cache.clone()
    NB, BS, H, D = k_cache.shape
    k_out.view(NB * BS, H, D)[slots] = rotated[valid].to(k_cache.dtype)
    v_out.view(NB * BS, H, D)[slots] = value[valid]
    return k_out, v_out
