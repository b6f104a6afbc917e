"""The silu_mul task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import load_task
from seed_files import import_seed, require_triton

TASK = load_task("silu_mul")
SEEDS = Path(TASK.seeds_dir)
SHAPES = [{"T": 1, "I": 1000}, {"T": 7, "I": 333}, {"T": 5, "I": 17}, {"T": 64, "I": 256}]
TRITON_SEEDS = ["triton_rowwise", "triton_flat"]


def _import(name):
    return import_seed("silu_mul", name)


def _inputs(shape, dtype, seed=0):
    return TASK.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(seed))


def _assert_matches(out, inputs, dtype):
    (x,) = inputs
    ref = TASK.reference(x.double())
    assert out.dtype == dtype and out.shape == (x.shape[0], x.shape[1] // 2)
    tol = TASK.tolerances[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol)


def _untouched(inputs, kernel, **config):
    before = inputs[0].clone()
    out = kernel(*inputs, **config)
    assert torch.equal(inputs[0], before)  # fp32 .to() aliases x: no seed may write into it
    return out


@pytest.fixture(scope="module", params=TRITON_SEEDS)
def triton_seed(request):
    require_triton()
    return request.param, _import(request.param)


@pytest.mark.parametrize("dtype", TASK.dtypes)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['T']}x{s['I']}")
def test_cpu_seed_matches_reference(shape, dtype):
    module = _import("cpu_torch")
    inputs = _inputs(shape, dtype)
    for chunk in load_candidate(SEEDS / "cpu_torch.py").space["CHUNK"]:
        _assert_matches(_untouched(inputs, module.kernel, CHUNK=chunk), inputs, dtype)


@pytest.mark.parametrize("dtype", TASK.dtypes)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['T']}x{s['I']}")
def test_triton_seeds_match_reference(triton_seed, shape, dtype):
    _, module = triton_seed
    inputs = _inputs(shape, dtype, seed=1)
    _assert_matches(_untouched(inputs, module.kernel), inputs, dtype)


@pytest.mark.parametrize("I", [333, 3003])  # odd: the up half starts at an odd column; 3003 > every BLOCK
def test_every_triton_config_is_correct_for_odd_i(triton_seed, I):
    name, module = triton_seed
    inputs = _inputs({"T": 3, "I": I}, torch.bfloat16, seed=2)
    configs = load_candidate(SEEDS / f"{name}.py").all_configs()
    assert 1 < len(configs) <= 12
    for config in configs:
        _assert_matches(module.kernel(*inputs, **config), inputs, torch.bfloat16)


def test_wrong_answers_are_rejected_by_the_tolerance():
    # Inputs with spread must make each plausible mistake visibly wrong.
    (x,) = _inputs({"T": 7, "I": 1000}, torch.bfloat16)
    x = x.double()
    gate, up = x[:, :1000], x[:, 1000:]
    ref = TASK.reference(x)
    tol = TASK.tolerances[torch.bfloat16]
    F = torch.nn.functional
    wrongs = {
        "gate and up swapped": F.silu(up) * gate,
        "relu": F.relu(gate) * up,
        "gelu": F.gelu(gate) * up,
        "sigmoid without the gate": torch.sigmoid(gate) * up,
        "up shifted by one column": F.silu(gate[:, :-1]) * x[:, 1001:],
    }
    for name, wrong in wrongs.items():
        if wrong.shape != ref.shape:
            wrong = torch.cat([wrong, ref[:, -1:]], dim=1)
        assert ((wrong - ref).abs() > tol.atol + tol.rtol * ref.abs()).any(), name


def test_make_inputs_deterministic_and_spread():
    shape = {"T": 16, "I": 257}
    (a,), (b,) = _inputs(shape, torch.float32, seed=5), _inputs(shape, torch.float32, seed=5)
    (c,) = _inputs(shape, torch.float32, seed=6)
    assert a.shape == (16, 514) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert _inputs(shape, torch.bfloat16)[0].dtype == torch.bfloat16
    gate, up = a[:, :257], a[:, 257:]
    for half in (gate, up):
        row_rms = half.pow(2).mean(-1).sqrt()
        assert row_rms.max() / row_rms.min() > 2  # rows of different scales
        assert (half != 0).float().mean() > 0.99
    # Gates reach silu's flat negative tail and its linear side alike.
    assert (gate < -3).any() and (gate > 3).any() and (gate.abs() < 0.5).any()
    assert not torch.allclose(gate.pow(2).mean(-1), up.pow(2).mean(-1), rtol=0.5)  # scaled independently


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 16
    assert {s["I"] for s in public} == {14336, 18432, 28672, 2048}
    assert {s["T"] for s in public} >= {1, 64, 256, 4096, 16384}
    assert max(TASK.shape_cost(s, torch.bfloat16).bytes for s in public) <= 2**30  # under 1 GiB a call
    held_dims = TASK.gpu.held_out.dims
    assert any(i % 2 == 1 for i in held_dims["I"])  # an odd I can be drawn
    assert 3 * held_dims["T"][1] * max(held_dims["I"]) * 2 <= 2**30  # held-out draws stay under 1 GiB too
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["T"] >= 1 and s["I"] >= 17 for s in held)
    assert TASK.gpu.held_out.odd and TASK.cpu.held_out.odd  # odd T from the ranges
    assert all(s["T"] * 2 * s["I"] <= 128 * 1024 for s in TASK.cpu.public)
    cost = TASK.shape_cost({"T": 64, "I": 14336}, torch.bfloat16)
    # Read 64 x 28672 bf16, write 64 x 14336 bf16: 3 * 64 * 14336 * 2 bytes.
    assert cost.bytes == 5505024
    assert cost.flops == 5 * 64 * 14336
    assert TASK.shape_cost({"T": 64, "I": 14336}, torch.float32).bytes == 2 * cost.bytes
    assert TASK.shape_weight({"T": 1, "I": 14336}) > TASK.shape_weight({"T": 4096, "I": 14336}) > 0
    assert set(TASK.dtypes) == {torch.bfloat16, torch.float16, torch.float32}
    assert tuple(TASK.forbidden) == ()  # torch has no fused silu_mul op to forbid


def test_cpu_seed_calls_no_library_kernel():
    # The honest seed is built from aten ops only: nothing from vLLM's or another library's namespace.
    (x,) = _inputs({"T": 4, "I": 64}, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _import("cpu_torch").kernel(x)
    names = {e.name for e in prof.events()}
    assert "aten::silu" in names
    assert all(n.startswith("aten::") for n in names if "::" in n)
