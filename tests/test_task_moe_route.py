"""The moe_route task (DeepSeek-V3 grouped routing): the reference against a hand-worked example, the
custom check (order free, near-ties only where the reference has them, classic mistakes rejected with a
clear message), the seeds against the reference on odd T, and one judged evaluation on the CPU."""

import math
import random
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task
from seed_files import import_seed, require_triton

TASK = load_task("moe_route")
SEEDS = Path(TASK.seeds_dir)
E, GROUPS, SIZE = 256, 8, 32
TRITON_SEEDS = ("triton_rowwise", "triton_fused_grouped_topk")


def _inputs(T, seed=0):
    return TASK.make_inputs({"T": T, "E": E}, torch.float32, "cpu", torch.Generator().manual_seed(seed))


def _ref(logits, bias):
    return TASK.reference(logits.double(), bias.double())


def _check(inputs, outputs):
    return TASK.check(inputs, outputs, _ref(*inputs), torch.float32)


def _route(choice, group_score, weigh, k_groups=4, renorm=True, scale=2.5):
    """Routing with pluggable mistakes: ``choice`` ranks experts, ``group_score`` ranks groups [T, 8],
    ``weigh`` gives the weight basis [T, E]."""
    T = choice.shape[0]
    kept = group_score.topk(k_groups, dim=-1).indices
    keep = torch.zeros(T, GROUPS, dtype=torch.bool).scatter_(1, kept, True).repeat_interleave(SIZE, dim=1)
    ids = choice.masked_fill(~keep, float("-inf")).topk(8, dim=-1).indices
    w = weigh.gather(1, ids)
    if renorm:
        w = w / w.sum(dim=-1, keepdim=True)
    return (w * scale).float(), ids


def _top2(choice):
    return choice.view(-1, GROUPS, SIZE).topk(2, dim=-1).values.sum(dim=-1)


# -- the reference -------------------------------------------------------------------------------------

def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_reference_matches_a_hand_worked_example():
    # Five groups carry some strong experts; everything else sits at logit -6 (score 0.0025).
    logits = torch.full((1, E), -6.0, dtype=torch.float64)
    logits[0, 0:4] = 3.0     # group 0: four at 0.9526        -> group score 1.905
    logits[0, 32:35] = 2.0   # group 1: three at 0.8808       -> 1.762
    logits[0, 64:66] = 1.0   # group 2: two at 0.7311, +0.2 bias on 65 -> 0.731 + 0.931 = 1.662
    logits[0, 96:98] = 0.5   # group 3: two at 0.6225         -> 1.245
    logits[0, 128] = 4.0     # group 4: the single best expert (0.982), but its group scores 0.985: dropped
    bias = torch.zeros(E, dtype=torch.float64)
    bias[65] = 0.2
    weights, ids = TASK.reference(logits, bias)
    order = ids[0].argsort()
    # Kept groups 0-3; by choice score: 0-3 (0.953), 65 (0.931, thanks to its bias), 32-34 (0.881).
    assert ids[0][order].tolist() == [0, 1, 2, 3, 32, 33, 34, 65]
    s = [_sig(3.0)] * 4 + [_sig(2.0)] * 3 + [_sig(1.0)]  # 65 weighs by its unbiased score
    expected = [2.5 * v / sum(s) for v in s]
    assert weights[0][order].tolist() == pytest.approx(expected, rel=1e-12)
    assert float(weights.sum()) == pytest.approx(2.5, rel=1e-12)
    assert weights.dtype == torch.float64 and ids.dtype == torch.int64


def test_reference_returns_the_kernel_types_at_fp32():
    logits, bias = _inputs(5)
    weights, ids = TASK.reference(logits, bias)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    assert weights.shape == ids.shape == (5, 8)
    w64, ids64 = _ref(logits, bias)
    assert torch.equal(ids.sort(-1).values, ids64.sort(-1).values)
    assert TASK.check((logits, bias), (weights, ids), (w64, ids64), torch.float32) == []


# -- the check -----------------------------------------------------------------------------------------

def test_honest_answers_pass_in_any_order():
    inputs = _inputs(64, seed=1)
    weights, ids = (t.clone() for t in _ref(*inputs))
    perm = torch.stack([torch.randperm(8, generator=torch.Generator().manual_seed(r)) for r in range(64)])
    assert _check(inputs, (weights.float(), ids)) == []
    assert _check(inputs, (weights.gather(1, perm).float(), ids.gather(1, perm))) == []
    # Ids reordered without their weights: the weight no longer belongs to its expert.
    rolled = ids.roll(1, dims=1)
    failures = _check(inputs, (weights.float(), rolled))
    assert len(failures) == 1 and "weights differ" in failures[0]


def _no_groups(s, c, x):
    ids = c.topk(8, dim=-1).indices
    w = s.gather(1, ids)
    return (w / w.sum(dim=-1, keepdim=True) * 2.5).float(), ids


def _softmax_scores(s, c, x):
    p = torch.softmax(x, dim=-1)
    choice = p + (c - s)  # the bias on softmax probabilities
    return _route(choice, _top2(choice), p)


# name: (routing from scores s, choice scores c and logits x; what the message must say)
WRONG = {
    "no_groups": (_no_groups, "no groups"),
    "bias_ignored": (lambda s, c, x: _route(s, _top2(s), s), "bias left out"),
    "bias_in_weights": (lambda s, c, x: _route(c, _top2(c), c), "weights differ"),
    "no_renormalization": (lambda s, c, x: _route(c, _top2(c), s, renorm=False), "not renormalized"),
    "no_scale": (lambda s, c, x: _route(c, _top2(c), s, scale=1.0), "2.5 routed scaling factor is missing"),
    "group_score_is_best_expert": (lambda s, c, x: _route(c, c.view(-1, 8, 32).amax(-1), s), "best expert only"),
    "softmax_not_sigmoid": (_softmax_scores, "expert set"),
    "top3_groups": (lambda s, c, x: _route(c, _top2(c), s, k_groups=3), "expert set"),
}


@pytest.mark.parametrize("name", WRONG)
def test_wrong_routings_fail_with_a_clear_message(name):
    inputs = _inputs(256, seed=2)
    logits, bias = (t.double() for t in inputs)
    scores = torch.sigmoid(logits)
    variant, says = WRONG[name]
    failures = _check(inputs, variant(scores, scores + bias, logits))
    assert failures and says in " ".join(failures), failures
    # Caught on many rows, not just an unlucky one: even T = 1 shapes fail within a few calls.
    assert int(failures[0].split(" of 256 rows")[0].split()[-1]) >= 25, failures


def test_fp32_work_done_in_bf16_fails():
    logits, bias = _inputs(256, seed=3)
    s = torch.sigmoid(logits.bfloat16())
    c = s + bias.bfloat16()
    weights, ids = _route(c.float(), _top2(c.float()), s.float())
    assert _check((logits, bias), (weights, ids))


def _swap(outputs, row, out_expert, in_expert, weights_row=None):
    weights, ids = (t.clone() for t in outputs)
    ids[row][ids[row] == out_expert] = in_expert
    if weights_row is not None:
        weights[row] = weights_row
    return weights.float(), ids


def _best_outside(choice, ids, row):
    """The best expert of a kept group that the reference did not choose (the 9th) and the 8th."""
    group_scores = _top2(choice[row:row + 1])[0]
    kept = group_scores.topk(4).indices
    members = (kept[:, None] * SIZE + torch.arange(SIZE)).flatten()
    rest = members[~torch.isin(members, ids[row])]
    ninth = rest[choice[row, rest].argmax()]
    eighth = ids[row][choice[row, ids[row]].argmin()]
    return int(eighth), int(ninth)


def _weights_of(logits, row, ids):
    s = torch.sigmoid(logits[row].double())[ids]
    return (s / s.sum() * 2.5).float()


def test_near_tie_of_8th_and_9th_expert_accepts_either():
    logits, bias = _inputs(4, seed=4)
    choice = torch.sigmoid(logits.double()) + bias.double()
    _, ids = _ref(logits, bias)
    eighth, ninth = _best_outside(choice, ids, 0)
    # Lift the 9th's bias until it beats the 8th by 1e-6 (< TIE_EPS): the reference now takes it.
    bias = bias.clone()
    bias[ninth] += float(choice[0, eighth] - choice[0, ninth]) + 1e-6
    inputs = (logits, bias)
    ref = _ref(*inputs)
    assert ninth in ref[1][0] and eighth not in ref[1][0]
    other_ids = ref[1][0].clone()
    other_ids[other_ids == ninth] = eighth
    other = _swap(ref, 0, ninth, eighth, _weights_of(logits, 0, other_ids))
    assert _check(inputs, (ref[0].float(), ref[1])) == []
    assert _check(inputs, other) == []  # the other side of the tie, weighed by its own experts
    # The tie excuses that swap only: the weights must still be the other set's own ...
    wrong_weights = _swap(ref, 0, ninth, eighth)
    assert "weights differ" in " ".join(_check(inputs, wrong_weights))
    # ... and a second, untied expert swapped on the same row fails.
    best = int(ref[1][0][choice[0, ref[1][0]].argmax()])
    members = torch.arange(E)[~torch.isin(torch.arange(E), ref[1][0])]
    far = int(members[choice[0, members].argmin()])
    failures = _check(inputs, _swap(other, 0, best, far))
    assert failures and "1 of 4 rows choose a different expert set" in failures[0]


def test_swap_at_the_boundary_fails_where_the_reference_has_no_tie():
    logits, bias = _inputs(4, seed=4)
    choice = torch.sigmoid(logits.double()) + bias.double()
    ref = _ref(logits, bias)
    eighth, ninth = _best_outside(choice, ref[1], 0)
    assert choice[0, eighth] - choice[0, ninth] > 1e-4  # a clear gap
    swapped = ref[1][0].clone()
    swapped[swapped == eighth] = ninth
    failures = _check((logits, bias), _swap(ref, 0, eighth, ninth, _weights_of(logits, 0, swapped)))
    assert failures and "1 of 4 rows" in failures[0] and "no near-tie" in failures[0]


def test_near_tie_of_4th_and_5th_group_accepts_either():
    logits, bias = _inputs(1, seed=5)
    choice = torch.sigmoid(logits.double()) + bias.double()
    order = _top2(choice)[0].argsort(descending=True)
    fourth, fifth = int(order[3]), int(order[4])
    # Lift the 5th group's best expert until its group beats the 4th by 1e-7.
    gap = float(_top2(choice)[0, fourth] - _top2(choice)[0, fifth])
    lead = fifth * SIZE + int(choice[0, fifth * SIZE:(fifth + 1) * SIZE].argmax())
    bias = bias.clone()
    bias[lead] += gap + 1e-7
    inputs = (logits, bias)
    ref = _ref(*inputs)
    choice = torch.sigmoid(logits.double()) + bias.double()
    scores = _top2(choice)[0]
    assert abs(float(scores[fourth] - scores[fifth])) < 1e-6
    # The other side: keep the 4th group instead of the 5th, then its best 8.
    kept = order[:4]
    keep = torch.zeros(GROUPS, dtype=torch.bool)
    keep[kept] = True
    ids = choice[0].masked_fill(~keep.repeat_interleave(SIZE), float("-inf")).topk(8).indices
    assert not torch.equal(ids.sort().values, ref[1][0].sort().values)
    other = (_weights_of(logits, 0, ids)[None], ids[None])
    assert _check(inputs, other) == []
    # Keeping only three groups' worth of the right answer is not excused by the group tie.
    wrong = _route(choice, _top2(choice), torch.sigmoid(logits.double()), k_groups=3)
    assert _check(inputs, wrong)


@pytest.mark.parametrize("mangle, says", [
    (lambda w, i: (w, torch.cat([i[:, :1], i[:, :7]], dim=1)), "twice"),
    (lambda w, i: (w, i + 256), "must lie in [0, 256)"),
    (lambda w, i: (w.masked_fill(torch.ones_like(w, dtype=torch.bool), float("nan")), i), "NaN"),
    (lambda w, i: (w[:, :4], i[:, :4]), "shape"),
])
def test_malformed_outputs_get_a_message_not_an_exception(mangle, says):
    inputs = _inputs(8, seed=6)
    weights, ids = _ref(*inputs)
    failures = _check(inputs, mangle(weights.float(), ids))
    assert len(failures) == 1 and says in failures[0], failures


# -- inputs, shapes, cost ------------------------------------------------------------------------------

def test_make_inputs_deterministic_and_spread():
    (a, bias), (b, _) = _inputs(512, seed=7), _inputs(512, seed=7)
    (c, _) = _inputs(512, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert bias.shape == (E,) and 0.05 < float(bias.std()) < 0.2
    means = a.mean(dim=-1)
    assert float(means.max() - means.min()) > 4  # per-row shift
    assert 1.5 < float(a.std(dim=-1).mean()) < 2.5
    top = torch.sigmoid(a).amax(dim=-1)
    assert float(top.max()) > 0.999 and float(top.min()) < 0.99  # saturated and unsaturated rows


def test_shapes_cost_and_weights():
    assert [s["T"] for s in TASK.gpu.public] == [1, 8, 64, 256, 4096, 16384]
    assert all(s["E"] == E for s in TASK.gpu.public + TASK.cpu.public)
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["T"] % 2 == 1 and s["E"] == E for s in held)
    assert max(s["T"] for s in TASK.cpu.public) <= 256
    cost = TASK.shape_cost({"T": 64, "E": E}, torch.float32)
    assert cost.bytes == 64 * E * 4 + E * 4 + 64 * 8 * 4 + 64 * 8 * 8
    assert cost.flops == 8 * 64 * E
    assert TASK.shape_weight({"T": 256, "E": E}) == 1.0 > TASK.shape_weight({"T": 4096, "E": E}) > 0
    assert TASK.dtypes == (torch.float32,) and callable(TASK.check)
    assert sorted(p.stem for p in TASK.seeds()) == sorted(["cpu_torch", *TRITON_SEEDS])


# -- the seeds -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("T", [1, 7, 64, 333])
def test_cpu_seed_matches_reference(T):
    inputs = _inputs(T, seed=10 + T)
    before = tuple(t.clone() for t in inputs)
    out = import_seed("moe_route", "cpu_torch").kernel(*inputs)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.int64
    assert _check(inputs, out) == []
    assert all(torch.equal(x, y) for x, y in zip(inputs, before))


@pytest.fixture(scope="module", params=TRITON_SEEDS)
def triton_seed(request):
    require_triton()
    return request.param, import_seed("moe_route", request.param)


@pytest.mark.parametrize("T", [1, 6, 13])
def test_triton_seeds_match_reference(triton_seed, T):
    inputs = _inputs(T, seed=20 + T)
    out = triton_seed[1].kernel(*inputs)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.int64
    assert _check(inputs, out) == []


def test_triton_configs_are_correct_on_an_odd_shape(triton_seed):
    # T = 9 leaves a tail in every multi-row program (ROWS = 2, 4, 8, 16). The interpreter ignores
    # num_warps, so one config per ROWS covers what it can check.
    name, module = triton_seed
    inputs = _inputs(9, seed=30)
    configs = load_candidate(SEEDS / f"{name}.py").valid_configs()
    assert 1 < len(configs) <= 12
    seen = set()
    for config in configs:
        key = config.get("ROWS")
        if key in seen:
            continue
        seen.add(key)
        assert _check(inputs, module.kernel(*inputs, **config)) == [], config


@pytest.mark.gpu
@pytest.mark.parametrize("name", ("cpu_torch", *TRITON_SEEDS))
def test_seeds_on_the_gpu(name):
    module = import_seed("moe_route", name)
    for T in (1, 257, 4096, 16383):
        logits, bias = (t.cuda() for t in _inputs(T, seed=40 + T))
        weights, ids = module.kernel(logits, bias)
        assert weights.is_cuda and ids.is_cuda
        inputs = (logits.cpu(), bias.cpu())
        assert _check(inputs, (weights.cpu(), ids.cpu())) == [], (name, T)


# -- end to end ----------------------------------------------------------------------------------------

def test_judge_passes_the_cpu_seed_and_fails_a_routing_without_groups(tmp_path):
    v = evaluate(TASK, load_candidate(SEEDS / "cpu_torch.py"), None, JudgeOptions(device="cpu"))
    assert v.verdict == "pass", v.reasons
    assert v.speedup and v.speedup > 0
    wrong = tmp_path / "no_groups.py"
    wrong.write_text(
        "import torch\n\n"
        "def kernel(logits, bias):\n"
        "    scores = torch.sigmoid(logits)\n"
        "    ids = (scores + bias).topk(8, dim=-1).indices\n"
        "    w = scores.gather(1, ids)\n"
        "    return w * (2.5 / w.sum(-1, keepdim=True)), ids\n")
    v = evaluate(TASK, load_candidate(wrong), None, JudgeOptions(device="cpu", time_it=False))
    assert v.verdict == "fail"
    assert any(r.code == "wrong_output" and "expert set" in r.detail for r in v.reasons), v.reasons
