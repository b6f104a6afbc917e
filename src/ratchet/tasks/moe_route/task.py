"""DeepSeek-V3 MoE routing ("noaux_tc"): pick 8 of 256 experts per token and their gate weights.

For each token row of router logits [T, 256] (fp32) and the trained correction bias [256]:
  scores = sigmoid(logits); choice = scores + bias (the bias steers *which* experts, never how much);
  the 256 experts form 8 groups of 32; a group's score is the sum of its two best choice scores;
  keep the 4 best groups; among their 128 experts take the 8 best by choice score;
  weights = the unbiased scores of those 8, renormalized to sum 1, times 2.5 (routed_scaling_factor).
The kernel returns (weights [T, 8] fp32, ids [T, 8] int64) in any order within a row.

Correctness is a custom check: per row the same expert set as the reference and the same weight per
expert (compared after sorting by id). Where the reference itself shows a near-tie (8th and 9th choice
scores, or 4th and 5th group scores, within ``TIE_EPS``), any answer that is a correct routing under
that tie is accepted; everywhere else the set must match exactly.
"""

import itertools

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, decode_weight, tensor_bytes

N_EXPERTS = 256
N_GROUPS = 8
GROUP_SIZE = N_EXPERTS // N_GROUPS
TOPK_GROUPS = 4
TOPK = 8
SCALE = 2.5  # DeepSeek-V3's routed_scaling_factor

# Scores near a selection boundary closer than this count as tied. An honest fp32 kernel's choice score
# is within ~3e-7 of the float64 one (sigmoid to a few ulp, plus the bias add), a group score (two of them
# summed) within ~1e-6, so its comparisons can only flip where the true gap is below ~1e-6: 1e-5 leaves a
# tenfold margin. Work in bf16 or fp16 is off by ~1e-3 and flips choices on many rows, so it still fails.
# With the inputs below about one row in two thousand has such a tie (9 of 16384 in one draw).
TIE_EPS = 1e-5
# Gate weights (~0.05 to 1.5): honest fp32 math (sigmoid, sum of 8, one division) is within ~1e-6
# relative; a bias leaking into the weights moves them by ~10%, a missing scale by 2.5x.
WEIGHT_TOL = Tolerance(atol=1e-6, rtol=1e-5)


def _choice_scores(logits, bias):
    """(scores, choice, group_scores) in the inputs' dtype."""
    scores = torch.sigmoid(logits)
    choice = scores + bias
    return scores, choice, _group_scores(choice)


def _group_scores(choice):
    """[T, 8]: the sum of the two best choice scores of each group."""
    return choice.view(-1, N_GROUPS, GROUP_SIZE).topk(2, dim=-1).values.sum(dim=-1)


def _kept_experts(group_scores):
    """[T, 256] bool: the experts of each row's top-4 groups."""
    kept = group_scores.topk(TOPK_GROUPS, dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
    return keep.repeat_interleave(GROUP_SIZE, dim=1)


def _grouped_topk(choice, group_scores):
    # Experts outside the kept groups get -inf, not 0 as some ports do: a choice score can be negative
    # (tiny sigmoid plus a negative bias), and 0 would then beat a kept expert.
    masked = choice.masked_fill(~_kept_experts(group_scores), float("-inf"))
    return masked.topk(TOPK, dim=-1).indices


def reference(logits, bias):
    # Plain torch in whatever dtype it is given. The judge hands it float64 for checking: the check needs
    # the true order of the scores to tell a genuine near-tie from a wrong pick, and an fp32 reference
    # would carry rounding errors as large as an honest kernel's. At the task's dtype (fp32) it is the
    # timed baseline, and returns fp32 weights and int64 ids, the output types a kernel must match.
    scores, choice, group_scores = _choice_scores(logits, bias)
    ids = _grouped_topk(choice, group_scores)
    weights = scores.gather(1, ids)
    weights = weights * (SCALE / weights.sum(dim=-1, keepdim=True))
    return weights, ids


def make_inputs(shape, dtype, device, generator):
    T, E = shape["T"], shape["E"]
    # Router logits ~ N(0, 2^2) plus a per-row shift in [-3, 3]: the shift moves a row along the sigmoid,
    # from saturated rows (top scores ~0.999, where the bias alone orders the best experts) to rows in the
    # sigmoid's linear part, so the bias weighs differently per row and shift-invariant shortcuts
    # (softmax) are wrong. The correction bias is small, ~N(0, 0.1^2), like a trained one, yet it
    # reorders the top experts on nearly every row: ignoring it, or putting it in the weights, shows.
    shift = (torch.rand(T, 1, generator=generator, device=device) * 2.0 - 1.0) * 3.0
    logits = torch.randn(T, E, generator=generator, device=device) * 2.0 + shift
    bias = torch.randn(E, generator=generator, device=device) * 0.1
    return logits.to(dtype), bias.to(dtype)


def cost(shape, dtype):
    T, E = shape["T"], shape["E"]
    # Read logits and bias once; write fp32 weights and int64 ids. ~8 flops per logit: the sigmoid
    # (exp, add, reciprocal), the bias add and a few compares for the group and expert selections.
    moved = (tensor_bytes((T, E), dtype) + tensor_bytes((E,), dtype)
             + tensor_bytes((T, TOPK), torch.float32) + tensor_bytes((T, TOPK), torch.int64))
    return Cost(bytes=moved, flops=8.0 * T * E)


# Every way to keep 4 of 8 groups, for judging rows with a near-tie: [70, 8] bool.
_GROUP_SETS = torch.tensor([[g in c for g in range(N_GROUPS)]
                            for c in itertools.combinations(range(N_GROUPS), TOPK_GROUPS)])


def _near_tie_rows(choice, group_scores):
    """Rows where the reference's own choice is within TIE_EPS of another: 4th vs 5th group score, or
    8th vs 9th choice score among the kept groups' experts."""
    g = group_scores.sort(dim=-1, descending=True).values
    group_tie = g[:, TOPK_GROUPS - 1] - g[:, TOPK_GROUPS] <= TIE_EPS
    masked = choice.masked_fill(~_kept_experts(group_scores), float("-inf"))
    c = masked.topk(TOPK + 1, dim=-1).values
    return group_tie | (c[:, TOPK - 1] - c[:, TOPK] <= TIE_EPS)


def _legitimate(choice, group_scores, ids, chunk=256):
    """[R] bool: is the row's expert set a correct routing when ties within TIE_EPS may go either way?

    It is when some set of 4 groups (a) is a top-4 up to TIE_EPS, (b) holds all 8 chosen experts, and
    (c) has no unchosen expert above the weakest chosen one by more than TIE_EPS.
    """
    out = []
    sets = _GROUP_SETS.to(choice.device)
    members = sets.repeat_interleave(GROUP_SIZE, dim=1)  # [70, 256]
    for lo in range(0, choice.shape[0], chunk):
        c, g, i = choice[lo:lo + chunk], group_scores[lo:lo + chunk, None, :], ids[lo:lo + chunk]
        lowest_kept = torch.where(sets, g, float("inf")).amin(dim=-1)
        highest_dropped = torch.where(~sets, g, float("-inf")).amax(dim=-1)
        groups_ok = lowest_kept >= highest_dropped - TIE_EPS  # (a) [R, 70]
        chosen = torch.zeros_like(c, dtype=torch.bool).scatter_(1, i, True)
        chosen_groups = chosen.view(-1, N_GROUPS, GROUP_SIZE).any(dim=-1)
        holds = ~(chosen_groups[:, None, :] & ~sets).any(dim=-1)  # (b)
        rivals = torch.where(members & ~chosen[:, None, :], c[:, None, :], float("-inf")).amax(dim=-1)
        experts_ok = c.gather(1, i).amin(dim=-1, keepdim=True) >= rivals - TIE_EPS  # (c)
        out.append((groups_ok & holds & experts_ok).any(dim=-1))
    return torch.cat(out)


def _set_hint(got_ids, scores, choice):
    """Name the classic mistake that explains most of the wrong rows, if one does."""
    guesses = {
        "a top-8 over all 256 experts, no groups": choice.topk(TOPK, dim=-1).indices,
        "the bias left out of the selection": _grouped_topk(scores, _group_scores(scores)),
        "group scores by their best expert only, not the top-2 sum": _grouped_topk(
            choice, choice.view(-1, N_GROUPS, GROUP_SIZE).amax(dim=-1)),
    }
    counts = {name: int((guess.sort(dim=-1).values == got_ids).all(dim=-1).sum()) for name, guess in guesses.items()}
    name = max(counts, key=counts.get)
    return f" ({counts[name]} of them match {name})" if counts[name] * 2 > got_ids.shape[0] else ""


def _malformed(weights, ids, T, E):
    """Failures that make the outputs unreadable as a routing: shapes, id range, repeats, NaN."""
    if tuple(weights.shape) != (T, TOPK) or tuple(ids.shape) != (T, TOPK):
        return [f"outputs must be weights and ids of shape [{T}, {TOPK}], got {list(weights.shape)} "
                f"and {list(ids.shape)}"]
    if ids.is_floating_point() or ids.dtype == torch.bool:
        return [f"ids must be integer expert indices, got {ids.dtype}"]
    if T == 0:
        return []
    if int(ids.min()) < 0 or int(ids.max()) >= E:
        return [f"expert ids must lie in [0, {E}), got {int(ids.min())}..{int(ids.max())}"]
    sorted_ids = ids.long().sort(dim=-1).values
    repeat = (sorted_ids[:, 1:] == sorted_ids[:, :-1]).any(dim=-1)
    if repeat.any():
        r = int(repeat.nonzero()[0])
        return [f"{int(repeat.sum())} of {T} rows name an expert twice; e.g. row {r}: {sorted_ids[r].tolist()}"]
    if not torch.isfinite(weights).all():
        return [f"{int((~torch.isfinite(weights)).any(dim=-1).sum())} of {T} rows have NaN/Inf weights"]
    return []


def _weights_failure(got_w, want_w, got_ids, judged):
    """One message for the rows (of ``judged``) whose per-expert weights are off, with a likely cause."""
    bad = ((got_w - want_w).abs() > WEIGHT_TOL.atol + WEIGHT_TOL.rtol * want_w.abs()) & judged[:, None]
    if not bad.any():
        return []
    rows = bad.any(dim=-1)
    r = int(rows.nonzero()[0])
    k = int(bad[r].nonzero()[0])
    total = float(got_w[r].sum())
    if abs(total - 1.0) < 1e-3:
        hint = "normalized to 1: the 2.5 routed scaling factor is missing?"
    elif abs(total - SCALE) > 1e-3:
        hint = "not renormalized over the 8 chosen experts?"
    else:
        hint = "right sum, wrong split: the bias in the weights, or scores other than sigmoid(logits)?"
    return [f"weights differ on {int(rows.sum())} of {got_w.shape[0]} rows beyond atol={WEIGHT_TOL.atol:g} "
            f"rtol={WEIGHT_TOL.rtol:g}; e.g. row {r} expert {int(got_ids[r, k])}: got {float(got_w[r, k]):.6g}, "
            f"expected {float(want_w[r, k]):.6g}; the row's weights sum to {total:.6g} ({hint})"]


def check(inputs, outputs, reference_outputs, dtype):
    """Per row: the reference's expert set (or a legitimate one where the reference has a near-tie) and
    the same weight per expert, both compared after sorting by expert id, since order is free."""
    logits, bias = inputs
    weights, ids = outputs
    ref_weights, ref_ids = reference_outputs
    T, E = logits.shape
    failures = _malformed(weights, ids, T, E)
    if failures or T == 0:
        return failures
    got_ids, order = ids.long().sort(dim=-1)
    got_w = weights.double().gather(1, order)
    want_ids, want_order = ref_ids.long().sort(dim=-1)
    want_w = ref_weights.double().gather(1, want_order)

    scores, choice, group_scores = _choice_scores(logits.double(), bias.double())
    differ = (got_ids != want_ids).any(dim=-1)
    accepted = torch.zeros_like(differ)
    tied = differ & _near_tie_rows(choice, group_scores)  # only here may the sets differ
    if tied.any():
        accepted[tied] = _legitimate(choice[tied], group_scores[tied], got_ids[tied])
        # A legitimate other set is weighed by its own experts' unbiased scores.
        own = scores[accepted].gather(1, got_ids[accepted])
        want_w[accepted] = own * (SCALE / own.sum(dim=-1, keepdim=True))
    wrong = differ & ~accepted
    if wrong.any():
        r = int(wrong.nonzero()[0])
        failures.append(
            f"{int(wrong.sum())} of {T} rows choose a different expert set than the reference, with no "
            f"near-tie (within {TIE_EPS:g}) to excuse it; e.g. row {r}: got {got_ids[r].tolist()}, "
            f"expected {want_ids[r].tolist()}{_set_hint(got_ids[wrong], scores[wrong], choice[wrong])}")
    return failures + _weights_failure(got_w, want_w, got_ids, judged=~wrong)


TASK = Task(
    name="moe_route",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        # Decode batches (one token per sequence) and prefill chunks; E is DeepSeek-V3's 256 experts.
        public=[{"T": t, "E": N_EXPERTS} for t in (1, 8, 64, 256, 4096, 16384)],
        # Odd token counts up to past the largest prefill chunk: tails of multi-row programs.
        held_out=ShapeRange(dims={"T": (1, 20000), "E": [N_EXPERTS]}, count=2),
    ),
    cpu=ShapeSet(
        public=[{"T": t, "E": N_EXPERTS} for t in (1, 8, 64, 256)],
        held_out=ShapeRange(dims={"T": (1, 300), "E": [N_EXPERTS]}, count=2),
    ),
    dtypes=(torch.float32,),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    check=check,
    # The library kernels of this very op, as serving engines register them (vLLM's fused grouped_topk,
    # SGLang's moe_fused_gate). Names from their sources; neither library is installed here to confirm
    # what torch.profiler lists. torch has no op of its own for it; topk and sigmoid are the honest parts.
    forbidden=("_moe_C::grouped_topk", "sgl_kernel::moe_fused_gate"),
    description=(
        "DeepSeek-V3 MoE routing (noaux_tc), run once per MoE layer per step: for fp32 router logits "
        "[T, 256] and a correction bias [256], scores = sigmoid(logits), choice = scores + bias; the 256 "
        "experts form 8 groups of 32, a group scores the sum of its two best choice scores, the 4 best "
        "groups are kept and the 8 best experts by choice score among them are chosen; their weights are "
        "the unbiased scores renormalized to sum 1 and times 2.5. Return (weights [T, 8] fp32, ids [T, 8] "
        "int64) in any order within a row. Judged per row: the same expert set and weights within "
        "1e-5 relative; where the reference shows a near-tie (1e-5) either side is accepted. Tiny and "
        "latency-bound at decode (T = 1 to 256: one launch, one row per warp is plenty), memory-bound at "
        "prefill (T = 4096 to 16384); the work is selection, not arithmetic, so fusing it all in one "
        "kernel with several rows per program is the idea."
    ),
)
