"""DeepSeek-V3 routing as one fused Triton kernel over ROWS token rows per program.

The idea: the whole grouped top-k (sigmoid, bias, group scores, group selection, expert top-8,
renormalize, scale) is selection on 256 values per row, far too little work for a program of its own.
A [ROWS, 8 groups, 32 experts] tile gives each program ROWS rows side by side: every step is one
vectorized reduction over the tile, so the rows share the program's instructions and latency, the
prefill grid shrinks ROWS-fold, and logits are read once (straight into registers) and each result
written once, with no intermediate tensor in memory. Where the per-row answer is the same, the code is
that of triton_rowwise.py lifted by one dimension.

Selection rounds use "max, then the lowest index holding it": the result never depends on reduction
order, and exactly one expert is picked per round, so every one of the 8 output slots is written.
Rows past T (the last program's tail) load 0.0 logits, compute harmlessly and store nothing.
Not yet measured on a GPU.
"""

import triton
import triton.language as tl

from ratchet.tasks.moe_route.seeds._routing import GROUP_SIZE, N_GROUPS, SCALE, TOPK, TOPK_GROUPS, operands

# A tile holds ROWS * 256 values, ROWS * 256 / (32 * num_warps) per thread, and about five tiles are
# live. Compiled for sm_90 with Triton 3.6 (not run): ROWS=4 with 4 warps takes 64 registers, ROWS=16
# with 4 warps 238, and ROWS=16 with 2 warps spills to the stack, hence the constraint.
SPACE = {"ROWS": [4, 2, 8, 16], "num_warps": [4, 2, 8]}
CONSTRAINTS = ["ROWS <= 4 * num_warps"]


@triton.jit
def _fused_grouped_topk(logits_ptr, bias_ptr, w_ptr, ids_ptr, T, stride_row, scale,
                        ROWS: tl.constexpr, N_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                        TOPK_GROUPS: tl.constexpr, TOPK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # [ROWS]
    live = rows < T
    group = tl.arange(0, N_GROUPS)[None, :, None]  # [1, 8, 1]
    member = tl.arange(0, GROUP_SIZE)[None, None, :]  # [1, 1, 32]
    expert = group * GROUP_SIZE + member  # [1, 8, 32]
    r3 = rows[:, None, None]
    x = tl.load(logits_ptr + r3 * stride_row + expert, mask=live[:, None, None], other=0.0)
    score = tl.sigmoid(x)  # [ROWS, 8, 32]
    choice = score + tl.load(bias_ptr + expert)  # the bias is read once per program, shared by its rows

    # Group scores [ROWS, 8]: best plus second best (only the first position of the best removed).
    best = tl.max(choice, axis=2)
    best_at = tl.min(tl.where(choice == best[:, :, None], member, GROUP_SIZE), axis=2)
    second = tl.max(tl.where(member == best_at[:, :, None], float("-inf"), choice), axis=2)
    group_score = best + second

    # Keep 4 groups per row: 4 rounds of "best remaining group" over [ROWS, 8].
    g2 = tl.arange(0, N_GROUPS)[None, :]
    keep = tl.zeros([ROWS, N_GROUPS], dtype=tl.int1)
    for _ in tl.static_range(TOPK_GROUPS):
        top = tl.max(group_score, axis=1)
        pick = tl.min(tl.where(group_score == top[:, None], g2, N_GROUPS), axis=1)
        hit = g2 == pick[:, None]
        keep = keep | hit
        group_score = tl.where(hit, float("-inf"), group_score)

    # 8 rounds of "best remaining expert of a kept group"; slot records the round per expert.
    left = tl.where(keep[:, :, None], choice, float("-inf"))
    slot = tl.full([ROWS, N_GROUPS, GROUP_SIZE], -1, tl.int32)
    for k in tl.static_range(TOPK):
        top = tl.max(tl.max(left, axis=2), axis=1)
        at = tl.where(left == top[:, None, None], expert, N_GROUPS * GROUP_SIZE)
        pick = tl.min(tl.min(at, axis=2), axis=1)
        hit = expert == pick[:, None, None]
        slot = tl.where(hit, k, slot)
        left = tl.where(hit, float("-inf"), left)

    # Renormalize the unbiased scores of the 8 and scale; each chosen expert writes its own slot.
    chosen = (slot >= 0) & live[:, None, None]
    total = tl.sum(tl.sum(tl.where(chosen, score, 0.0), axis=2), axis=1)
    total = tl.where(live, total, 1.0)  # dead rows: no division by zero
    out = r3 * TOPK + slot
    tl.store(w_ptr + out, score * (scale / total)[:, None, None], mask=chosen)
    tl.store(ids_ptr + out, tl.broadcast_to(expert, [ROWS, N_GROUPS, GROUP_SIZE]).to(tl.int64), mask=chosen)


def kernel(logits, bias, ROWS=4, num_warps=4):
    logits, bias, weights, ids = operands(logits, bias)
    T = logits.shape[0]
    if T > 0:
        _fused_grouped_topk[(triton.cdiv(T, ROWS),)](
            logits, bias, weights, ids, T, logits.stride(0), SCALE,
            ROWS=ROWS, N_GROUPS=N_GROUPS, GROUP_SIZE=GROUP_SIZE, TOPK_GROUPS=TOPK_GROUPS, TOPK=TOPK,
            num_warps=num_warps)
    return weights, ids
