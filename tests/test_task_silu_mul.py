"""The silu_mul task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random

import torch

from ratchet.task import load_task
from seed_checks import SeedChecks, cpu_inputs, triton_seed_fixture
from seed_files import import_seed

TASK = load_task("silu_mul")
SHAPES = [{"T": 1, "I": 1000}, {"T": 7, "I": 333}, {"T": 5, "I": 17}, {"T": 64, "I": 256}]


triton_seed = triton_seed_fixture("silu_mul", ["triton_rowwise", "triton_flat"])


class TestSeeds(SeedChecks, task="silu_mul", shapes=SHAPES, most_configs=12,
                # odd I: the up half starts at an odd column; 3003 > every BLOCK
                odd_shapes=[{"T": 3, "I": 333}, {"T": 3, "I": 3003}]):
    """The shared seed checks (seed_checks.py) on silu_mul."""


def test_wrong_answers_are_rejected_by_the_tolerance():
    # Inputs with spread must make each plausible mistake visibly wrong.
    (x,) = cpu_inputs(TASK, {"T": 7, "I": 1000}, torch.bfloat16)
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
    (a,), (b,) = cpu_inputs(TASK, shape, torch.float32, seed=5), cpu_inputs(TASK, shape, torch.float32, seed=5)
    (c,) = cpu_inputs(TASK, shape, torch.float32, seed=6)
    assert a.shape == (16, 514) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert cpu_inputs(TASK, shape, torch.bfloat16)[0].dtype == torch.bfloat16
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
    (x,) = cpu_inputs(TASK, {"T": 4, "I": 64}, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        import_seed("silu_mul", "cpu_torch").kernel(x)
    names = {e.name for e in prof.events()}
    assert "aten::silu" in names
    assert all(n.startswith("aten::") for n in names if "::" in n)
