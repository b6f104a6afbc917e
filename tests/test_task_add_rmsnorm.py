"""The add_rmsnorm task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import os
import random

import torch

from ratchet.task import load_task
from seed_checks import SeedChecks, cpu_inputs, triton_seed_fixture
from seed_files import import_seed

TASK = load_task("add_rmsnorm")
SHAPES = [{"T": 1, "H": 1000}, {"T": 7, "H": 333}, {"T": 7, "H": 1000}, {"T": 64, "H": 256}]


def _assert_new_residual(outputs, inputs, dtype):
    # new_residual is the sum rounded once to the dtype, bit for bit (as vLLM stores it) ...
    x, residual, _, _ = inputs
    rounded = (x.float() + residual.float()).to(dtype)
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1" and outputs[1].device.type == "cpu":
        # ... except that Triton's interpreter casts fp32 to bf16 by truncation (measured, triton 3.x;
        # fp16 rounds to nearest, and on a GPU both do): there, within one bf16 ulp.
        ulp = 2.0 ** (torch.frexp(rounded.float())[1].float() - 8)
        assert ((outputs[1].float() - rounded.float()).abs() <= ulp).all()
    else:
        assert torch.equal(outputs[1], rounded)
    assert outputs[0].data_ptr() != outputs[1].data_ptr()


triton_seed = triton_seed_fixture("add_rmsnorm", ["triton_fused", "triton_persistent"])


class TestSeeds(SeedChecks, task="add_rmsnorm", shapes=SHAPES, most_configs=32,
                # 3003 > every BLOCK_H: the fused seed's chunked two-pass path. T = 9 rows: more than the
                # persistent seed's interpreter grid at 2 programs per SM, so its loops run.
                odd_shapes=[{"T": 9, "H": 333}, {"T": 9, "H": 3003}]):
    """The shared seed checks (seed_checks.py) on add_rmsnorm, and new_residual rounded once."""

    def check(self, outputs, inputs, dtype):
        super().check(outputs, inputs, dtype)
        _assert_new_residual(outputs, inputs, dtype)


def test_wrong_answers_are_rejected_by_the_tolerance():
    # Inputs with spread must make each plausible mistake visibly wrong in at least one output.
    x, residual, weight, eps = cpu_inputs(TASK, {"T": 7, "H": 1000}, torch.bfloat16)
    xd, rd, wd = x.double(), residual.double(), weight.double()
    ref_out, ref_res = TASK.reference(xd, rd, wd, eps)
    tol = TASK.tolerances[torch.bfloat16]

    def rejected(wrong, ref):
        return ((wrong - ref).abs() > tol.atol + tol.rtol * ref.abs()).any()

    assert rejected(TASK.reference(xd, rd, torch.ones_like(wd), eps)[0], ref_out)  # weight dropped
    assert rejected(TASK.reference(xd, torch.zeros_like(rd), wd, eps)[0], ref_out)  # residual not added
    assert rejected(xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * wd, ref_out)  # norm of x alone
    global_rms = ref_res * torch.rsqrt(ref_res.pow(2).mean() + eps) * wd
    assert rejected(global_rms, ref_out)
    assert rejected(xd, ref_res)  # new_residual = x (the add skipped)
    # The sum of squares held in fp16 (not fp32) overflows on the large rows: fp16's row sees it.
    x16, r16, w16, eps16 = cpu_inputs(TASK, {"T": 64, "H": 1000}, torch.float16, seed=3)
    s16 = x16 + r16
    low = s16 * torch.rsqrt(s16.pow(2).sum(-1, keepdim=True) / 1000 + eps16) * w16
    ref16 = TASK.reference(x16.double(), r16.double(), w16.double(), eps16)[0]
    tol16 = TASK.tolerances[torch.float16]
    assert ((low.double() - ref16).abs() > tol16.atol + tol16.rtol * ref16.abs()).any()


def test_make_inputs_deterministic_and_spread():
    shape = {"T": 16, "H": 257}
    a, b = cpu_inputs(TASK, shape, torch.float32, seed=5), cpu_inputs(TASK, shape, torch.float32, seed=5)
    c = cpu_inputs(TASK, shape, torch.float32, seed=6)
    assert all(torch.equal(p, q) for p, q in zip(a[:3], b[:3])) and a[3] == b[3]
    assert all(not torch.equal(p, q) for p, q in zip(a[:3], c[:3]))
    x, residual, weight, eps = a
    assert eps in (1e-6, 1e-5)
    assert weight.std() > 0.05 and (weight != 1).all()
    for t in (x, residual, x + residual):
        row_rms = t.pow(2).mean(-1).sqrt()
        assert row_rms.max() / row_rms.min() > 2  # rows of different scales
        assert (t != 0).float().mean() > 0.99
    # x and residual scaled independently: normalizing either alone is not the answer.
    assert not torch.allclose(x.pow(2).mean(-1) / residual.pow(2).mean(-1), torch.ones(16), rtol=0.5)


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 16
    assert all(s["H"] in (4096, 7168, 8192) for s in public)
    assert {s["T"] for s in public} >= {1, 64, 256, 4096, 16384}
    assert max(TASK.shape_cost(s, torch.bfloat16).bytes for s in public) <= 1.1 * 2**30
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["T"] >= 1 and s["H"] >= 17 for s in held)
    assert any(h % 2 == 1 for h in TASK.gpu.held_out.dims["H"])  # an odd H can be drawn
    assert TASK.gpu.held_out.odd and TASK.cpu.held_out.odd  # odd T from the ranges
    assert all(s["T"] * s["H"] <= 64 * 1024 for s in TASK.cpu.public)
    cost = TASK.shape_cost({"T": 64, "H": 4096}, torch.bfloat16)
    # x, residual read; out, new_residual written: 4 * 64 * 4096 bf16 elements, plus the weight.
    assert cost.bytes == 4 * 64 * 4096 * 2 + 4096 * 2 == 2105344
    assert cost.flops == 5 * 64 * 4096
    assert TASK.shape_cost({"T": 64, "H": 4096}, torch.float32).bytes == 2 * cost.bytes
    assert TASK.shape_weight({"T": 1, "H": 4096}) > TASK.shape_weight({"T": 16384, "H": 4096}) > 0
    assert set(TASK.dtypes) == {torch.bfloat16, torch.float16, torch.float32}


def test_forbidden_names_match_the_profiler():
    x, residual, weight, eps = cpu_inputs(TASK, {"T": 4, "H": 64}, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.rms_norm(x + residual, (64,), weight, eps)
    assert set(TASK.forbidden) & {e.name for e in prof.events()}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        import_seed("add_rmsnorm", "cpu_torch").kernel(x, residual, weight, eps)
    assert not set(TASK.forbidden) & {e.name for e in prof.events()}  # the honest seed is not flagged
