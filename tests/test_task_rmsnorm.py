"""The rmsnorm task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random

import torch

from ratchet.task import load_task
from seed_checks import SeedChecks, cpu_inputs, triton_seed_fixture
from seed_files import import_seed

TASK = load_task("rmsnorm")
SHAPES = [{"T": 1, "H": 1000}, {"T": 7, "H": 333}, {"T": 7, "H": 1000}, {"T": 64, "H": 256}]


triton_seed = triton_seed_fixture("rmsnorm", ["triton_rowwise"])


class TestSeeds(SeedChecks, task="rmsnorm", shapes=SHAPES, most_configs=32,
                # 3003 > every BLOCK_H: the chunked two-pass path
                odd_shapes=[{"T": 3, "H": 333}, {"T": 3, "H": 3003}]):
    """The shared seed checks (seed_checks.py) on rmsnorm."""


def test_wrong_answers_are_rejected_by_the_tolerance():
    # Inputs with spread must make a dropped weight, or one statistic for all rows, visibly wrong.
    x, weight, eps = cpu_inputs(TASK, {"T": 7, "H": 1000}, torch.bfloat16)
    x, weight = x.double(), weight.double()
    ref = TASK.reference(x, weight, eps)
    tol = TASK.tolerances[torch.bfloat16]
    no_weight = TASK.reference(x, torch.ones_like(weight), eps)
    global_rms = x * torch.rsqrt(x.pow(2).mean() + eps) * weight
    for wrong in (no_weight, global_rms):
        assert ((wrong - ref).abs() > tol.atol + tol.rtol * ref.abs()).any()


def test_make_inputs_deterministic_and_spread():
    shape = {"T": 16, "H": 257}
    a, b = cpu_inputs(TASK, shape, torch.float32, seed=5), cpu_inputs(TASK, shape, torch.float32, seed=5)
    c = cpu_inputs(TASK, shape, torch.float32, seed=6)
    assert all(torch.equal(p, q) for p, q in zip(a[:2], b[:2])) and a[2] == b[2]
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    x, weight, eps = a
    assert eps in (1e-6, 1e-5)
    assert weight.std() > 0.05 and (weight != 1).all()
    row_rms = x.pow(2).mean(-1).sqrt()
    assert row_rms.max() / row_rms.min() > 2  # rows of different scales
    assert (x != 0).float().mean() > 0.99


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 16
    assert all(s["H"] in (4096, 7168, 8192) for s in public)
    assert {s["T"] for s in public} >= {1, 64, 256, 4096, 16384}
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["T"] >= 1 and s["H"] >= 17 for s in held)
    assert any(h % 2 == 1 for h in TASK.gpu.held_out.dims["H"])  # an odd H can be drawn
    assert all(s["T"] * s["H"] <= 64 * 1024 for s in TASK.cpu.public)
    cost = TASK.shape_cost({"T": 64, "H": 4096}, torch.bfloat16)
    assert cost.bytes == (2 * 64 * 4096 + 4096) * 2
    assert cost.flops == 4 * 64 * 4096
    assert TASK.shape_weight({"T": 1, "H": 4096}) > TASK.shape_weight({"T": 16384, "H": 4096}) > 0
    assert set(TASK.dtypes) == {torch.bfloat16, torch.float16, torch.float32}


def test_forbidden_names_match_the_profiler():
    x, weight, eps = cpu_inputs(TASK, {"T": 4, "H": 64}, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.rms_norm(x, (64,), weight, eps)
    names = {e.name for e in prof.events()}
    assert set(TASK.forbidden) & names
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        import_seed("rmsnorm", "cpu_torch").kernel(x, weight, eps)
    assert not set(TASK.forbidden) & {e.name for e in prof.events()}  # the honest seed is not flagged
