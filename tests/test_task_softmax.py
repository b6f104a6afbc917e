"""The softmax task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import DEFAULT_TOLERANCES, load_task
from seed_checks import SeedChecks, assert_matches_reference, cpu_inputs, triton_seed_fixture
from seed_files import import_seed

TASK = load_task("softmax")
SEEDS = Path(TASK.seeds_dir)
# One vocabulary row (wider than every one-pass block), odd N, and many short rows.
SHAPES = [{"M": 1, "N": 32000}, {"M": 3, "N": 20001}, {"M": 7, "N": 1000}, {"M": 33, "N": 257}]
TRITON_SEEDS = ("triton_rowwise", "triton_online", "triton_resident")


def _bad(out, ref, dtype):
    tol = TASK.tolerances[dtype]
    return (out.double() - ref).abs() > tol.atol + tol.rtol * ref.abs()


triton_seed = triton_seed_fixture("softmax", TRITON_SEEDS)


class TestSeeds(SeedChecks, task="softmax", shapes=SHAPES, most_configs=24,
                # N = 20001 is odd and wider than every BLOCK_N: the looped paths, the split row, its masked tail
                odd_shapes=[{"M": 3, "N": 20001}]):
    """The shared seed checks (seed_checks.py) on softmax."""


def test_triton_seeds_take_masked_logits(triton_seed):
    # -inf entries (masked vocabulary), a run of them wider than a vector and a block: the online seed's
    # groups of 4 neighbours that hold only -inf must add nothing (not NaN) to their running sum.
    (x,) = cpu_inputs(TASK, {"M": 3, "N": 20001}, torch.float32, seed=4)
    x[:, ::3] = -float("inf")
    x[1, 100:9000] = -float("inf")
    x[2, :-5] = -float("inf")  # five finite entries, at the row's masked tail
    assert_matches_reference(TASK, triton_seed[1].kernel(x), (x,), torch.float32)


def test_wrong_answers_are_rejected_by_the_tolerance():
    (x,) = cpu_inputs(TASK, {"M": 8, "N": 20001}, torch.float32)
    xd = x.double()
    ref = TASK.reference(xd)
    # No max subtraction: exp overflows fp32 on the high rows (inf / inf = NaN).
    naive = x.exp() / x.exp().sum(-1, keepdim=True)
    assert (~torch.isfinite(naive)).any()
    # Normalized by one global max and sum instead of each row's: wrong rows.
    e = (xd - xd.max()).exp()
    global_sum = e / e.sum()
    # fp32 work done in bf16 (#16 of the catalog): the fp32 row must see it.
    xb = x.bfloat16()
    eb = (xb - xb.amax(-1, keepdim=True)).exp()
    bf16_math = (eb / eb.sum(-1, keepdim=True)).float()
    assert _bad(global_sum, ref, torch.float32).any()
    assert _bad(bf16_math, ref, torch.float32).any()
    # Zeros for the small probabilities pass the default atol (1e-2 for bf16; every probability of a
    # near-uniform 20k row is ~5e-5) but not the task's.
    truncated = torch.where(ref > 1e-3, ref, torch.zeros_like(ref))
    default = DEFAULT_TOLERANCES[torch.bfloat16]
    assert not ((truncated - ref).abs() > default.atol + default.rtol * ref.abs()).all(-1).any()
    assert _bad(truncated, ref, torch.bfloat16).any(-1).all()


def test_make_inputs_deterministic_and_spread():
    shape = {"M": 64, "N": 257}
    (a,), (b,) = cpu_inputs(TASK, shape, torch.float32, seed=5), cpu_inputs(TASK, shape, torch.float32, seed=5)
    (c,) = cpu_inputs(TASK, shape, torch.float32, seed=6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    row_std = a.std(-1)
    assert row_std.max() / row_std.min() > 4  # flat and peaked rows
    high = a.amax(-1) > 89  # exp(x) overflows fp32 there without the max subtraction
    assert 0.25 < high.float().mean() < 0.75
    assert a.mean(-1).max() - a.mean(-1).min() > 60  # rows at different offsets
    p = TASK.reference(a.double())
    assert p.max(-1).values.max() > 0.3 and p.max(-1).values.min() < 0.05  # peaked and nearly uniform rows


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 16
    assert {s["N"] for s in public} >= {128256, 129280, 32000}
    assert {s["M"] for s in public} >= {1, 256, 4096, 32768}
    assert max(s["M"] * s["N"] for s in public) <= 16384 * 8192
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["M"] >= 1 and s["N"] >= 17 for s in held)
    assert 100003 in TASK.gpu.held_out.dims["N"]
    assert all(s["M"] % 2 == 1 and s["N"] % 2 == 1 for s in TASK.cpu.held_out.draw(random.Random(2)))
    assert all(s["M"] * s["N"] <= 64 * 1024 for s in TASK.cpu.public)
    cost = TASK.shape_cost({"M": 64, "N": 128256}, torch.bfloat16)
    assert cost.bytes == 2 * 64 * 128256 * 2  # read x, write out, 2 bytes each
    assert cost.flops == 5 * 64 * 128256
    assert TASK.shape_cost({"M": 1, "N": 1000}, torch.float32).bytes == 8000
    assert TASK.shape_weight({"M": 1, "N": 128256}) > TASK.shape_weight({"M": 4096, "N": 1024}) > 0
    assert set(TASK.dtypes) == {torch.bfloat16, torch.float16, torch.float32}


def test_forbidden_names_match_the_profiler():
    (x,) = cpu_inputs(TASK, {"M": 4, "N": 64}, torch.float32)
    calls = (lambda: torch.softmax(x, -1), lambda: torch.nn.functional.softmax(x, -1),
             lambda: torch.nn.functional.log_softmax(x, -1), lambda: x.softmax(-1))
    for call in calls:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call()
        assert set(TASK.forbidden) & {e.name for e in prof.events()}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        import_seed("softmax", "cpu_torch").kernel(x)
    assert not set(TASK.forbidden) & {e.name for e in prof.events()}  # the honest seed is not flagged


@pytest.mark.parametrize("block_n", load_candidate(SEEDS / "triton_resident.py").space["BLOCK_N"])
def test_resident_layout_keeps_a_split_row_resident(block_n):
    # The resident seed's barrier waits for a row's other pieces: deadlock unless they run at once, which
    # one program per SM guarantees. Every row is covered by whole blocks, and none is split when the
    # interpreter runs programs one at a time.
    layout = import_seed("softmax", "triton_resident").layout
    for M in (1, 3, 64, 132, 256, 4096):
        for N in (17, 1000, 20001, 32000, 128256, 129280, 100003):
            for sms in (8, 132):
                block, pieces, slots = layout(M, N, block_n, sms, interpreted=False)
                assert pieces * block >= N > (pieces - 1) * block
                assert 1 <= slots <= M
                if pieces > 1:
                    assert slots * pieces <= sms and block <= block_n
            assert layout(M, 128256, block_n, 132, interpreted=True)[1] == 1
    assert layout(64, 128256, 16384, 132, interpreted=False) == (16384, 8, 16)
