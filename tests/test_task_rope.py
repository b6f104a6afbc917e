"""The rope task and its seeds: values against the float64 reference, per dtype, odd shapes included."""

import random

import torch

from ratchet.task import load_task
from seed_checks import SeedChecks, assert_matches_reference, cpu_inputs, triton_seed_fixture
from seed_files import import_seed

TASK = load_task("rope")
SHAPES = [
    {"T": 1, "Hq": 32, "Hkv": 8, "D": 128},  # Llama-3-8B decode
    {"T": 7, "Hq": 16, "Hkv": 1, "D": 64},  # DeepSeek-V3-like: one shared k head
    {"T": 5, "Hq": 7, "Hkv": 5, "D": 96},  # odd head counts, half of 48 (not a power of two)
]
TRITON_SEEDS = ("triton_rope", "triton_heads_split")


triton_seed = triton_seed_fixture("rope", TRITON_SEEDS)


class TestSeeds(SeedChecks, task="rope", shapes=SHAPES, most_configs=12,
                # 37 q heads and 3 k heads: partial head blocks for every BLOCK_H; D = 96 pads the half to 64 lanes
                odd_shapes=[{"T": 3, "Hq": 37, "Hkv": 3, "D": 96}]):
    """The shared seed checks (seed_checks.py) on rope."""


def test_triton_seeds_take_strided_views(triton_seed):
    # q and k as slices of a fused qkv projection [T, Hq + 2 * Hkv, D]: not contiguous across heads.
    T, Hq, Hkv, D = 4, 8, 2, 64
    q, k, cos, sin = cpu_inputs(TASK, {"T": T, "Hq": Hq, "Hkv": Hkv, "D": D}, torch.float16, seed=3)
    qkv = torch.cat((q, k, torch.zeros_like(k)), dim=1)
    q_view, k_view = qkv[:, :Hq], qkv[:, Hq:Hq + Hkv]
    outs = triton_seed[1].kernel(q_view, k_view, cos, sin)
    assert_matches_reference(TASK, outs, (q, k, cos, sin), torch.float16)


def test_wrong_answers_are_rejected_by_the_tolerance():
    q, k, cos, sin = (t.double() for t in cpu_inputs(TASK, {"T": 7, "Hq": 8, "Hkv": 2, "D": 128}, torch.bfloat16))
    ref_q, _ = TASK.reference(q, k, cos, sin)
    tol = TASK.tolerances[torch.bfloat16]
    half = 64

    def interleaved(x):  # GPT-J style pairs (x0, x1), (x2, x3), ... instead of rotate-half
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)

    def wrong_sign(x):  # rotation the other way
        return TASK.reference(x, k, cos, -sin)[0]

    def shifted(x):  # another token's angles
        return TASK.reference(x, k, cos.roll(1, 0), sin.roll(1, 0))[0]

    def halves_swapped(x):
        out = TASK.reference(x, k, cos, sin)[0]
        return torch.cat((out[..., half:], out[..., :half]), dim=-1)

    for wrong in (interleaved, wrong_sign, shifted, halves_swapped):
        assert ((wrong(q) - ref_q).abs() > tol.atol + tol.rtol * ref_q.abs()).any(), wrong.__name__


def test_make_inputs_deterministic_and_real_tables():
    shape = {"T": 16, "Hq": 8, "Hkv": 2, "D": 128}
    a, b = cpu_inputs(TASK, shape, torch.bfloat16, seed=5), cpu_inputs(TASK, shape, torch.bfloat16, seed=5)
    c = cpu_inputs(TASK, shape, torch.bfloat16, seed=6)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not any(torch.equal(x, y) for x, y in zip(a, c))
    q, k, cos, sin = a
    assert q.dtype == k.dtype == torch.bfloat16 and cos.dtype == sin.dtype == torch.float32
    assert cos.shape == sin.shape == (16, 64)
    torch.testing.assert_close(cos.double() ** 2 + sin.double() ** 2, torch.ones(16, 64, dtype=torch.float64))
    # Each token's row is a real rotary table: theta^(-2i/D) frequencies (theta 500000 or 10000) at one
    # integer position below 128k, the positions differing per token. Found by trying every position.
    candidates = torch.arange(131072, dtype=torch.float64)[:, None]
    found = set()
    for t in (0, 1, 2):
        for theta in (500000.0, 10000.0):
            inv_freq = theta ** (-torch.arange(64, dtype=torch.float64) * 2.0 / 128)
            angles = candidates * inv_freq[None, :]
            err = (angles.cos() - cos[t].double()).abs().amax(-1) + (angles.sin() - sin[t].double()).abs().amax(-1)
            if err.min() < 1e-6:
                found.add((theta, int(err.argmin())))
    assert len(found) == 3 and len({theta for theta, _ in found}) == 1
    head_rms = q.float().pow(2).mean(-1).sqrt()
    assert head_rms.max() / head_rms.min() > 3  # heads of different scales


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 16
    assert {(s["Hq"], s["Hkv"], s["D"]) for s in public} == {(32, 8, 128), (64, 8, 128), (128, 1, 64)}
    assert {s["T"] for s in public} >= {1, 256, 4096, 16384}
    held = TASK.gpu.held_out.draw(random.Random(0)) + TASK.cpu.held_out.draw(random.Random(1))
    assert all(s["T"] % 2 == 1 and s["D"] % 2 == 0 for s in held)
    assert 96 in TASK.gpu.held_out.dims["D"]
    assert all(s["T"] * (s["Hq"] + s["Hkv"]) * s["D"] <= 64 * 1024 for s in TASK.cpu.public)
    cost = TASK.shape_cost({"T": 64, "Hq": 32, "Hkv": 8, "D": 128}, torch.bfloat16)
    # q and k read and written (2 bytes each), cos and sin [64, 64] fp32 read.
    assert cost.bytes == 2 * (64 * 32 * 128 + 64 * 8 * 128) * 2 + 2 * 64 * 64 * 4
    assert cost.flops == 3 * 64 * 40 * 128
    assert TASK.shape_weight({"T": 1, "Hq": 32, "Hkv": 8, "D": 128}) > TASK.shape_weight(
        {"T": 16384, "Hq": 32, "Hkv": 8, "D": 128}) > 0
    assert set(TASK.dtypes) == {torch.bfloat16, torch.float16}
    assert TASK.forbidden == ()
