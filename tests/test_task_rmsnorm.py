"""The rmsnorm task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import load_task
from seed_files import import_seed, require_triton

TASK = load_task("rmsnorm")
SEEDS = Path(TASK.seeds_dir)
SHAPES = [{"T": 1, "H": 1000}, {"T": 7, "H": 333}, {"T": 7, "H": 1000}, {"T": 64, "H": 256}]


def _import(name):
    return import_seed("rmsnorm", name)


def _inputs(shape, dtype, seed=0):
    return TASK.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(seed))


def _assert_matches(out, inputs, dtype):
    x, weight, eps = inputs
    ref = TASK.reference(x.double(), weight.double(), eps)
    assert out.dtype == dtype and out.shape == x.shape
    tol = TASK.tolerances[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol)


@pytest.fixture(scope="module")
def triton_seed():
    require_triton()
    return _import("triton_rowwise")


@pytest.mark.parametrize("dtype", TASK.dtypes)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['T']}x{s['H']}")
def test_cpu_seed_matches_reference(shape, dtype):
    module = _import("cpu_torch")
    inputs = _inputs(shape, dtype)
    x_before = inputs[0].clone()
    for chunk in load_candidate(SEEDS / "cpu_torch.py").space["CHUNK"]:
        _assert_matches(module.kernel(*inputs, CHUNK=chunk), inputs, dtype)
    assert torch.equal(inputs[0], x_before)  # fp32 .to() aliases x: the seed must not write into it


@pytest.mark.parametrize("dtype", TASK.dtypes)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['T']}x{s['H']}")
def test_triton_seed_matches_reference(triton_seed, shape, dtype):
    inputs = _inputs(shape, dtype, seed=1)
    _assert_matches(triton_seed.kernel(*inputs), inputs, dtype)


@pytest.mark.parametrize("H", [333, 3003])  # 3003 > every BLOCK_H: exercises the chunked two-pass path
def test_every_triton_config_is_correct_for_odd_h(triton_seed, H):
    inputs = _inputs({"T": 3, "H": H}, torch.bfloat16, seed=2)
    configs = load_candidate(SEEDS / "triton_rowwise.py").all_configs()
    assert len(configs) > 1
    for config in configs:
        _assert_matches(triton_seed.kernel(*inputs, **config), inputs, torch.bfloat16)


def test_wrong_answers_are_rejected_by_the_tolerance():
    # Inputs with spread must make a dropped weight, or one statistic for all rows, visibly wrong.
    x, weight, eps = _inputs({"T": 7, "H": 1000}, torch.bfloat16)
    x, weight = x.double(), weight.double()
    ref = TASK.reference(x, weight, eps)
    tol = TASK.tolerances[torch.bfloat16]
    no_weight = TASK.reference(x, torch.ones_like(weight), eps)
    global_rms = x * torch.rsqrt(x.pow(2).mean() + eps) * weight
    for wrong in (no_weight, global_rms):
        assert ((wrong - ref).abs() > tol.atol + tol.rtol * ref.abs()).any()


def test_make_inputs_deterministic_and_spread():
    shape = {"T": 16, "H": 257}
    a, b = _inputs(shape, torch.float32, seed=5), _inputs(shape, torch.float32, seed=5)
    c = _inputs(shape, torch.float32, seed=6)
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
    x, weight, eps = _inputs({"T": 4, "H": 64}, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.rms_norm(x, (64,), weight, eps)
    names = {e.name for e in prof.events()}
    assert set(TASK.forbidden) & names
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _import("cpu_torch").kernel(x, weight, eps)
    assert not set(TASK.forbidden) & {e.name for e in prof.events()}  # the honest seed is not flagged
