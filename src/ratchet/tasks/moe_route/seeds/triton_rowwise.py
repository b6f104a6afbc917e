"""DeepSeek-V3 routing in Triton, the straightforward way: one program per token row.

A row's 256 logits are loaded as an [8 groups, 32 experts] tile, so group reductions are reductions
along axis 1. Everything stays in registers: sigmoid, bias, the top-2 sum of each group, 4 rounds of
"take the best group", 8 rounds of "take the best expert" over the kept groups, then the renormalized,
scaled weights are stored. A pick never depends on reduction order: on exact equality the lowest index
wins. A row is tiny (1 KB), so one warp suffices; at prefill (T = 16384) this launches 16384 programs of
little work each, which is what triton_fused_grouped_topk.py is about.
Not yet measured on a GPU.
"""

import triton
import triton.language as tl

from ratchet.tasks.moe_route.seeds._routing import GROUP_SIZE, N_GROUPS, SCALE, TOPK, TOPK_GROUPS, operands

SPACE = {"num_warps": [1, 2, 4]}


@triton.jit
def _route_row(logits_ptr, bias_ptr, w_ptr, ids_ptr, stride_row, scale,
               N_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUPS: tl.constexpr,
               TOPK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    group = tl.arange(0, N_GROUPS)
    member = tl.arange(0, GROUP_SIZE)
    expert = group[:, None] * GROUP_SIZE + member[None, :]  # [8, 32] expert ids
    x = tl.load(logits_ptr + row * stride_row + expert)
    score = tl.sigmoid(x)
    choice = score + tl.load(bias_ptr + expert)

    # Group score: best plus second best. Only the first position of the best is removed, so a group
    # whose two best are equal scores twice that value, as topk(2) does.
    best = tl.max(choice, axis=1)
    best_at = tl.min(tl.where(choice == best[:, None], member[None, :], GROUP_SIZE), axis=1)
    second = tl.max(tl.where(member[None, :] == best_at[:, None], float("-inf"), choice), axis=1)
    group_score = best + second

    # Keep the 4 best groups: 4 rounds over 8 values.
    keep = group < 0  # all False
    for _ in tl.static_range(TOPK_GROUPS):
        top = tl.max(group_score, axis=0)
        pick = tl.min(tl.where(group_score == top, group, N_GROUPS), axis=0)
        keep = keep | (group == pick)
        group_score = tl.where(group == pick, float("-inf"), group_score)

    # The 8 best experts of the kept groups; slot[e] records the round that picked expert e.
    left = tl.where(keep[:, None], choice, float("-inf"))
    slot = tl.full([N_GROUPS, GROUP_SIZE], -1, tl.int32)
    for k in tl.static_range(TOPK):
        top = tl.max(tl.max(left, axis=1), axis=0)
        pick = tl.min(tl.min(tl.where(left == top, expert, N_GROUPS * GROUP_SIZE), axis=1), axis=0)
        slot = tl.where(expert == pick, k, slot)
        left = tl.where(expert == pick, float("-inf"), left)

    # Weights from the unbiased scores, renormalized over the 8 and scaled; each expert writes its slot.
    chosen = slot >= 0
    total = tl.sum(tl.sum(tl.where(chosen, score, 0.0), axis=1), axis=0)
    out = row * TOPK + slot
    tl.store(w_ptr + out, score * (scale / total), mask=chosen)
    tl.store(ids_ptr + out, expert.to(tl.int64), mask=chosen)


def kernel(logits, bias, num_warps=1):
    logits, bias, weights, ids = operands(logits, bias)
    T = logits.shape[0]
    if T > 0:
        _route_row[(T,)](logits, bias, weights, ids, logits.stride(0), SCALE,
                         N_GROUPS=N_GROUPS, GROUP_SIZE=GROUP_SIZE, TOPK_GROUPS=TOPK_GROUPS, TOPK=TOPK,
                         num_warps=num_warps)
    return weights, ids
