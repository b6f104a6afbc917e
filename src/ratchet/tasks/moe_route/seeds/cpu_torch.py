"""DeepSeek-V3 routing in plain torch (CPU or GPU): sigmoid, bias, group scores, top-4 groups, top-8.

Unlike the reference, the expert top-8 runs only over the 128 experts of the kept groups, gathered into
a [T, 4, 32] block, rather than over all 256 with the other half masked to -inf: half the top-k input,
and no [T, 256] mask. Local positions in the block map back to expert ids through the kept group ids.
"""

import torch

N_GROUPS, TOPK_GROUPS, TOPK, SCALE = 8, 4, 8, 2.5


def kernel(logits, bias):
    T, E = logits.shape
    size = E // N_GROUPS
    scores = torch.sigmoid(logits)
    choice = (scores + bias).view(T, N_GROUPS, size)
    group_scores = choice.topk(2, dim=-1).values.sum(dim=-1)
    kept = group_scores.topk(TOPK_GROUPS, dim=-1).indices  # [T, 4]
    block = choice.gather(1, kept[:, :, None].expand(T, TOPK_GROUPS, size)).view(T, TOPK_GROUPS * size)
    local = block.topk(TOPK, dim=-1).indices  # [T, 8] positions in the block
    ids = kept.gather(1, local // size) * size + local % size
    weights = scores.gather(1, ids)  # the unbiased scores: the bias only steers the choice
    weights.mul_(SCALE / weights.sum(dim=-1, keepdim=True))
    return weights, ids
