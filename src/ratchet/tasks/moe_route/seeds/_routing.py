"""What the Triton moe_route seeds share (a helper, not a seed: files named with a leading underscore are not
candidates): DeepSeek-V3's routing constants, and the operands with their empty outputs."""

import torch

N_GROUPS, GROUP_SIZE, TOPK_GROUPS, TOPK, SCALE = 8, 32, 4, 8, 2.5


def operands(logits, bias):
    """logits with unit stride over the experts (the kernels read a row's experts that way), bias
    contiguous, and the outputs to fill: fp32 weights and int64 expert ids, [T, TOPK] each."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    T, E = logits.shape
    assert E == N_GROUPS * GROUP_SIZE, "DeepSeek-V3 routing: 256 experts in 8 groups of 32"
    weights = torch.empty((T, TOPK), dtype=torch.float32, device=logits.device)
    ids = torch.empty((T, TOPK), dtype=torch.int64, device=logits.device)
    return logits, bias.contiguous(), weights, ids
