"""The decode_attention task and its seeds: values against the fp32 reference over odd contexts, group sizes
and head sizes; wrong kernels (lengths ignored, wrong kv head, no scale, off by one) fail the tolerance."""

import math
import random
import sys
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task
from seed_files import import_seed, require_triton

TASK = load_task("decode_attention")
SEEDS = Path(TASK.seeds_dir)
BF16 = torch.bfloat16
TRITON_SEEDS = ("triton_gqa", "triton_split_k")
# Multi-query (G = 4 over one kv head); odd L with three different lengths; a group of 7 (padded to 16 rows in
# the Triton seeds); multi-head (G = 1) with D = 96, not a power of two.
SHAPES = [
    {"B": 1, "Hq": 4, "Hkv": 1, "L": 64, "D": 32},
    {"B": 3, "Hq": 8, "Hkv": 2, "L": 257, "D": 32},
    {"B": 2, "Hq": 14, "Hkv": 2, "L": 131, "D": 16},
    {"B": 2, "Hq": 4, "Hkv": 4, "L": 77, "D": 96},
    {"B": 2, "Hq": 32, "Hkv": 1, "L": 63, "D": 576},  # MLA-like: two blocks of 16 heads, D padded to 1024
    {"B": 2, "Hq": 128, "Hkv": 1, "L": 45, "D": 576},  # DeepSeek-V3's absorbed MLA heads: eight blocks
    {"B": 2, "Hq": 32, "Hkv": 1, "L": 50, "D": 576, "Dv": 512},  # MLA's value: the latent alone
    {"B": 2, "Hq": 8, "Hkv": 2, "L": 70, "D": 96, "Dv": 48},  # values narrower than keys, in two parts
]
# The real head layout (Llama-3-8B) at a size torch does in a blink on the CPU: for the wrong kernels.
LLAMA = {"B": 6, "Hq": 32, "Hkv": 8, "L": 512, "D": 128}
# Honest kernels must stay under this share of the tolerance (atol + rtol * |ref|): a margin of 2x.
MARGIN = 0.5


def _ids(shape):
    return "B{B}-Hq{Hq}-Hkv{Hkv}-L{L}-D{D}".format(**shape) + (f"-Dv{shape['Dv']}" if "Dv" in shape else "")


def _inputs(shape, seed=0):
    return TASK.make_inputs(shape, BF16, "cpu", torch.Generator().manual_seed(seed))


def _upcast(inputs, dtype=torch.float32):
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


def _reference(inputs):
    return TASK.reference(*_upcast(inputs, TASK.reference_dtype))


def _ratio(out, ref):
    """Largest |out - ref| / (atol + rtol * |ref|): under 1 passes the task's tolerance."""
    tol = TASK.tolerances[BF16]
    err = (out.double() - ref.double()).abs() / (tol.atol + tol.rtol * ref.double().abs())
    return err.max().item()


def _assert_matches(out, inputs):
    q, v = inputs[0], inputs[2]
    assert out.dtype == BF16 and out.shape == (*q.shape[:2], v.shape[-1])  # values may be narrower (MLA)
    assert torch.isfinite(out).all()
    ratio = _ratio(out, _reference(inputs))
    assert ratio < MARGIN, f"uses {ratio:.2f} of the tolerance"


def _naive(q, k, v, lens):
    """One (sequence, query head) at a time in float64, straight from the definition."""
    B, Hq, D = q.shape
    G = Hq // k.shape[1]
    out = torch.empty(B, Hq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        n = int(lens[b])
        for h in range(Hq):
            keys, values = k[b, h // G, :n].double(), v[b, h // G, :n].double()
            scores = keys @ q[b, h].double() / math.sqrt(D)
            w = torch.exp(scores - scores.max())
            out[b, h] = (w / w.sum()) @ values
    return out


def _attend(q, k, v, lens, head_of=None, scale=None, score_dtype=torch.float32, weight_dtype=torch.float32,
            q_dtype=torch.float32):
    """Decode attention in fp32 with knobs to break it or lower its precision; returns bf16 like a kernel."""
    B, Hq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qs = (q.float() * scale).to(q_dtype).float()
    if head_of is None:  # query head h reads kv head h // G: a [B, Hkv, G, D] view, no copy of the cache
        kh, vh, qs = k.float(), v.float(), qs.reshape(B, Hkv, G, D)
    else:  # one kv head per query head, gathered
        heads = torch.tensor([head_of(h, G, Hkv) for h in range(Hq)])
        kh, vh, qs = k.float()[:, heads], v.float()[:, heads], qs.reshape(B, Hq, 1, D)
    scores = torch.matmul(qs, kh.transpose(-1, -2)).to(score_dtype).float()  # [B, heads, group, L]
    valid = torch.arange(L)[None, :] < lens[:, None].long()
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    p = torch.exp(scores - scores.amax(-1, keepdim=True))  # flash-style: unnormalized weights into P.V
    out = torch.matmul(p.to(weight_dtype).float(), vh) / p.sum(-1, keepdim=True)
    return out.reshape(B, Hq, D).to(BF16)


@pytest.fixture(scope="module", params=TRITON_SEEDS)
def triton_seed(request):
    require_triton()
    return request.param, import_seed("decode_attention", request.param)


def test_task_loads_with_its_seeds():
    assert TASK.name == "decode_attention"
    assert tuple(TASK.dtypes) == (BF16,) and TASK.reference_dtype == torch.float32
    assert {p.stem for p in TASK.seeds()} == {"cpu_torch", "cuda_cluster", "triton_gqa", "triton_split_k"}
    for path in TASK.seeds():
        assert "kernel" in path.read_text() and load_candidate(path).all_configs()


def test_reference_matches_a_naive_loop():
    inputs = _inputs({"B": 3, "Hq": 6, "Hkv": 2, "L": 37, "D": 16}, seed=3)
    assert len(set(inputs[3].tolist())) > 1  # lengths differ within the batch
    naive = _naive(*inputs)
    torch.testing.assert_close(TASK.reference(*_upcast(inputs, torch.float64)), naive, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(_reference(inputs).double(), naive, atol=1e-5, rtol=1e-5)  # the judge's fp32
    native = TASK.reference(*inputs)  # the timed baseline: the outputs' expected dtype and shape
    assert native.dtype == BF16 and native.shape == inputs[0].shape


def test_make_inputs_deterministic_lengths_and_junk():
    shape = {"B": 64, "Hq": 8, "Hkv": 2, "L": 400, "D": 32}
    a, b, c = _inputs(shape, 5), _inputs(shape, 5), _inputs(shape, 6)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not torch.equal(a[1], c[1])
    q, k, v, lens = a
    assert q.dtype == k.dtype == v.dtype == BF16 and lens.dtype == torch.int32
    assert k.shape == v.shape == (64, 2, 400, 32)
    assert lens.min() >= 400 // 8 and lens.max() == 400 and (lens == 400).sum() < 8
    assert lens.float().std() > 60  # spread over [L/8, L]
    valid = (torch.arange(400)[None, :] < lens[:, None].long())[:, None, :, None].expand_as(k)
    for t in (k, v):
        assert torch.isfinite(t).all()
    # Beyond seq_lens: keys 8x larger, values around 32; inside, O(1).
    assert k[~valid].float().std() > 6 * k[valid].float().std()
    assert v[~valid].float().mean() > 30 and v[valid].float().abs().mean() < 2
    # Query scales spread from flat to peaked heads.
    norms = q.float().norm(dim=-1) / math.sqrt(32)
    assert norms.max() / norms.min() > 8
    # The last valid position is the current token: its key points along its group's mean query.
    last = k[torch.arange(64), :, lens.long() - 1].float()  # [B, Hkv, D]
    mean_q = q.float().reshape(64, 2, 4, 32).mean(2)
    assert torch.nn.functional.cosine_similarity(last, mean_q, dim=-1).min() > 0.99
    # One sequence: its row is the full context.
    assert _inputs({"B": 1, "Hq": 4, "Hkv": 1, "L": 99, "D": 16})[3].tolist() == [99]


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_cpu_seed_matches_reference(shape):
    module = import_seed("decode_attention", "cpu_torch")
    inputs = _inputs(shape, seed=1)
    before = tuple(x.clone() for x in inputs)
    for chunk in load_candidate(SEEDS / "cpu_torch.py").space["CHUNK"]:
        _assert_matches(module.kernel(*inputs, CHUNK=chunk), inputs)
    assert all(torch.equal(x, y) for x, y in zip(inputs, before))


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_triton_seeds_match_reference(triton_seed, shape):
    inputs = _inputs(shape, seed=2)
    _assert_matches(triton_seed[1].kernel(*inputs), inputs)


def test_wide_heads_go_in_blocks_that_fit_an_sm(triton_seed):
    # DeepSeek's absorbed MLA (G = 128, D = 576 = 512 + 64) in blocks of 16 heads (a whole group with the
    # config's 64 positions asked for 1 MB of shared memory on the H200); Llama's D = 128 keeps whole groups
    # and the config's block; a head of 96 is 64 + 32, not one padded 128.
    name, module = triton_seed
    tiles = module.tiles
    if name == "triton_split_k":
        # 4 warps take 16 heads of MLA (mma.sync), 8 warps 64 (the rows of Hopper's wgmma), both 32
        # positions; Llama's tiles do not change with warps, nor does a group under 64 heads.
        assert tiles(128, 576, 64) == (16, 512, 64, 32, 8)
        assert tiles(128, 576, 64, num_warps=8) == (64, 512, 64, 32, 2)
        assert tiles(128, 576, 64, num_warps=8, same_kv=True) == (64, 512, 64, 64, 2)  # no value tiles
        assert tiles(32, 576, 64, num_warps=8) == (32, 512, 64, 32, 1)
        assert tiles(4, 128, 64, num_warps=8) == (16, 128, 0, 64, 1)
        budget = {4: 16 * 576, 8: 64 * 576}  # accumulator elements; keys at most 32 x 576
    else:
        assert tiles(128, 576, 64) == (16, 512, 64, 16, 8)
        budget = {4: 8192}
    assert tiles(4, 128, 64) == (16, 128, 0, 64, 1)
    assert tiles(64, 128, 128) == (64, 128, 0, 128, 1)
    assert tiles(5, 96, 32) == (16, 64, 32, 32, 1)
    assert tiles(2, 24, 64) == (16, 16, 16, 64, 1)
    for warps, acc_budget in budget.items():
        for G, D, block in ((128, 576, 64), (64, 128, 128), (32, 576, 32), (7, 100, 128)):
            args = (G, D, block) if name != "triton_split_k" else (G, D, block, warps)
            block_g, block_da, block_db, block_l, blocks = tiles(*args)
            assert block_da <= D <= block_da + block_db or (block_db == 0 and D == block_da)
            assert block_g * (block_da + block_db) <= acc_budget or block_g == 16
            assert block_l * (block_da + block_db) <= 2 * min(acc_budget, 16 * 576) and block_l >= 16
            assert blocks * block_g >= G



def test_split_k_reads_keys_once_when_values_are_the_same_memory():
    # DeepSeek's absorbed MLA passes its latent cache as both k_cache and v_cache; the split kernel then
    # loads each tile once (SAME_KV). With the same tiles, the answer must be bit for bit the one it gives
    # for two separate equal tensors, at the 64-head wgmma tile (8 warps) and the 16-head one; by default
    # the shared cache takes twice the positions per tile, and must still match the reference.
    require_triton()
    module = import_seed("decode_attention", "triton_split_k")
    q, k, _, lens = _inputs({"B": 2, "Hq": 64, "Hkv": 1, "L": 40, "D": 576}, seed=11)
    for config in ({"SPLITS": 2, "BLOCK_L": 16}, {"num_warps": 4, "WIDE_WARPS": 0, "BLOCK_L": 32}):
        shared = module.kernel(q, k, k, lens, **config)
        assert torch.equal(shared, module.kernel(q, k, k.clone(), lens, **config))
        _assert_matches(shared, (q, k, k, lens))
    _assert_matches(module.kernel(q, k, k, lens), (q, k, k, lens))


def test_split_k_takes_the_latent_alone_as_values_from_the_same_memory():
    # The deepseek workload passes the cache as keys and its first 512 channels (a view) as values: the
    # kernel still loads each tile once, and its output is bit for bit the first 512 columns of the whole
    # cache's (same tiles, same scores and weights). A view that is not the keys' first part is loaded apart.
    require_triton()
    module = import_seed("decode_attention", "triton_split_k")
    q, k, _, lens = _inputs({"B": 2, "Hq": 64, "Hkv": 1, "L": 40, "D": 576}, seed=12)
    assert module._same_kv(k, k[..., :512]) and not module._same_kv(k, k[..., :448])
    assert not module._same_kv(k, k[..., 64:])  # another part of the row: not the keys' own tiles
    for config in ({"SPLITS": 2, "BLOCK_L": 16}, {"SPLITS": 1}):
        narrow = module.kernel(q, k, k[..., :512], lens, **config)
        assert narrow.shape == (2, 64, 512)
        assert torch.equal(narrow, module.kernel(q, k, k, lens, **config)[..., :512])
        _assert_matches(narrow, (q, k, k[..., :512], lens))
    _assert_matches(module.kernel(q, k, k[..., 64:], lens), (q, k, k[..., 64:], lens))

def test_every_triton_config_is_correct_on_an_odd_shape(triton_seed):
    # L = 201 and lengths from 25 to 201: pieces of the split kernel past a short row are empty.
    name, module = triton_seed
    inputs = _inputs({"B": 3, "Hq": 8, "Hkv": 2, "L": 201, "D": 32}, seed=3)
    configs = load_candidate(SEEDS / f"{name}.py").all_configs()
    assert 1 < len(configs) <= 12
    for config in configs:
        _assert_matches(module.kernel(*inputs, **config), inputs)


@pytest.mark.parametrize("name", ("cpu_torch",) + TRITON_SEEDS)
@pytest.mark.parametrize("lengths", [(1, 150), (150, 149), (63, 64, 65)], ids=str)
def test_seeds_at_edge_lengths(name, lengths):
    # One position only, block edges (64 is the default BLOCK_L), a row one short of the next block.
    if name != "cpu_torch":
        require_triton()
    shape = {"B": len(lengths), "Hq": 8, "Hkv": 2, "L": 150, "D": 32}
    q, k, v, _ = _inputs(shape, seed=4)
    inputs = (q, k, v, torch.tensor(lengths, dtype=torch.int32))
    module = import_seed("decode_attention", name)
    configs = [{}, {"SPLITS": 8, "BLOCK_L": 32}, {"SPLITS": -1}] if name == "triton_split_k" else [{}]
    for config in configs:
        _assert_matches(module.kernel(*inputs, **config), inputs)


WRONG = {
    "ignores seq_lens": dict(lens=lambda lens, L: torch.full_like(lens, L)),
    "one position short": dict(lens=lambda lens, L: lens - 1),
    "one position too many": dict(lens=lambda lens, L: (lens + 1).clamp(max=L)),
    "kv head h % Hkv": dict(head_of=lambda h, G, Hkv: h % Hkv),
    "no 1/sqrt(D) scale": dict(scale=1.0),
    "scale 1/D": dict(scale=1.0 / 128),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_kernels_fail_the_tolerance(name):
    q, k, v, lens = _inputs(LLAMA, seed=7)
    assert (lens < LLAMA["L"]).sum() >= 3  # rows with junk behind them
    ref = _reference((q, k, v, lens))
    assert _ratio(_attend(q, k, v, lens), ref) < MARGIN  # the harness itself is honest
    knobs = dict(WRONG[name])
    used = knobs.pop("lens", None)
    wrong = _attend(q, k, v, used(lens, LLAMA["L"]) if used else lens, **knobs)
    assert _ratio(wrong, ref) > 3, f"{name}: only {_ratio(wrong, ref):.2f} of the tolerance"  # visibly wrong
    assert _ratio(torch.zeros_like(q), ref) > 3


def test_tolerance_margins_at_a_large_batch():
    # B = 128 of the 70B layout: a million outputs, so the extremes of the rounding errors show.
    shape = {"B": 128, "Hq": 64, "Hkv": 8, "L": 256, "D": 128}
    q, k, v, lens = _inputs(shape, seed=8)
    ref = _reference((q, k, v, lens))
    flash = _attend(q, k, v, lens, weight_dtype=BF16)  # weights rounded to bf16 for P.V, as FlashAttention
    bf16_scores = _attend(q, k, v, lens, score_dtype=BF16)  # Hugging Face eager attention's bf16 scores
    assert _ratio(flash, ref) < 0.4  # ~0.26 measured
    assert _ratio(bf16_scores, ref) > 1.2  # ~1.8 measured: lower precision than the task allows


def test_shapes_cost_and_weights():
    public = TASK.gpu.public
    assert 10 <= len(public) <= 14
    assert {(s["Hq"], s["Hkv"], s["D"]) for s in public} == {(32, 8, 128), (64, 8, 128), (128, 1, 576)}
    assert {s["B"] for s in public} == {1, 8, 32, 64, 256}
    assert {s["L"] for s in public} >= {1024, 4096, 32768, 131072}
    batch_context = {(s["B"], s["L"]) for s in public}
    assert {(1, 4096), (1, 32768), (1, 131072), (8, 32768), (64, 4096), (256, 1024)} <= batch_context

    def cache_gib(s):  # k and v together
        return 2 * s["B"] * s["Hkv"] * s["L"] * s["D"] * 2 / 2**30

    assert max(cache_gib(s) for s in public) <= 1.0
    dims = TASK.gpu.held_out.dims
    largest = {"B": max(dims["B"]), "Hkv": max(dims["Hkv"]), "L": dims["L"][1], "D": max(dims["D"])}
    assert cache_gib(largest) <= 2.0
    for held in (TASK.gpu.held_out, TASK.cpu.held_out):
        assert all(hq % hkv == 0 for hq in held.dims["Hq"] for hkv in held.dims["Hkv"])
    draws = TASK.gpu.held_out.draw(random.Random(0)) + TASK.gpu.held_out.draw(random.Random(1))
    assert all(s["L"] % 2 == 1 and 1000 <= s["L"] <= 131071 for s in draws)
    assert all(s["B"] * s["Hq"] * s["L"] * s["D"] <= 3 * 64 * 400 * 32 for s in TASK.cpu.public)
    # Cost: q, out and seq_lens, plus the expected valid part of the cache; 4 flops per (head, position, d).
    shape = {"B": 8, "Hq": 32, "Hkv": 8, "L": 32768, "D": 128}
    positions = 32768 + 7 * (4096 + 32768) / 2
    cost = TASK.shape_cost(shape, BF16)
    assert cost.bytes == 2 * 8 * 128 * 2 * positions + 2 * 8 * 32 * 128 * 2 + 8 * 4
    assert cost.flops == 4 * 32 * 128 * positions
    assert TASK.shape_cost({"B": 1, "Hq": 32, "Hkv": 8, "L": 4096, "D": 128}, BF16).flops == 4 * 32 * 4096 * 128
    assert TASK.shape_weight({**shape, "L": 4096}) == 1.0 > TASK.shape_weight({**shape, "L": 131072}) > 0


def test_expected_lengths_match_make_inputs():
    module = sys.modules[TASK.reference.__module__]
    shape = {"B": 2000, "Hq": 1, "Hkv": 1, "L": 64, "D": 1}
    sums = [int(_inputs(shape, seed)[3].sum()) for seed in range(5)]  # each sum within ~1% of the mean
    assert sum(sums) / len(sums) == pytest.approx(module.expected_valid_positions(2000, 64), rel=0.02)


def test_forbidden_names_match_the_profiler():
    q, k, v, lens = _inputs({"B": 2, "Hq": 4, "Hkv": 2, "L": 10, "D": 16})
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        sdpa(q[:, :, None].float(), k.float(), v.float(), enable_gqa=True)
    assert set(TASK.forbidden) & {e.name for e in prof.events()}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        import_seed("decode_attention", "cpu_torch").kernel(q, k, v, lens)
    assert not set(TASK.forbidden) & {e.name for e in prof.events()}


def test_judge_passes_the_cpu_seed():
    verdict = evaluate(TASK, load_candidate(SEEDS / "cpu_torch.py"), None, JudgeOptions(device="cpu"))
    assert verdict.verdict == "pass", verdict.reasons
    assert len(verdict.shapes) == len(TASK.cpu.public) + TASK.cpu.held_out.count
    assert verdict.speedup is not None


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [{"B": 3, "Hq": 32, "Hkv": 8, "L": 4099, "D": 128},
                                   {"B": 1, "Hq": 64, "Hkv": 8, "L": 32768, "D": 128},
                                   {"B": 2, "Hq": 40, "Hkv": 8, "L": 1001, "D": 96},
                                   {"B": 2, "Hq": 128, "Hkv": 1, "L": 8193, "D": 576},
                                   {"B": 2, "Hq": 128, "Hkv": 1, "L": 8193, "D": 576, "Dv": 512}], ids=_ids)
def test_seeds_on_the_gpu(shape):
    inputs = TASK.make_inputs(shape, BF16, "cuda", torch.Generator(device="cuda").manual_seed(0))
    ref = TASK.reference(*_upcast(inputs, TASK.reference_dtype)).cpu()
    for name in ("cpu_torch",) + TRITON_SEEDS:
        module = import_seed("decode_attention", name)
        for config in load_candidate(SEEDS / f"{name}.py").all_configs():
            out = module.kernel(*inputs, **config)
            assert out.dtype == BF16 and out.shape == ref.shape and out.is_cuda
            assert _ratio(out.cpu(), ref) < MARGIN, (name, config)


@pytest.mark.gpu
def test_split_k_on_the_gpu_with_the_latent_view_as_values():
    # What the deepseek workload runs: one cache as keys (576) and its first 512 channels as values, on the
    # 64-head wgmma tiles with each tile loaded once; equal to the first 512 columns of the whole cache's.
    module = import_seed("decode_attention", "triton_split_k")
    q, k, _, lens = TASK.make_inputs({"B": 2, "Hq": 128, "Hkv": 1, "L": 8193, "D": 576}, BF16, "cuda",
                                     torch.Generator(device="cuda").manual_seed(1))
    narrow = module.kernel(q, k, k[..., :512], lens)
    assert narrow.shape == (2, 128, 512)
    assert torch.equal(narrow, module.kernel(q, k, k, lens)[..., :512])
    ref = TASK.reference(*_upcast((q, k, k[..., :512], lens), TASK.reference_dtype)).cpu()
    assert _ratio(narrow.cpu(), ref) < MARGIN


def test_split_k_merges_many_pieces_in_blocks_with_a_partial_last_one():
    # 13 pieces: the merge takes them 8 at a time, the second block has 3 past the split count (weight 0);
    # rows shorter than most pieces leave those pieces empty (m = -inf, s = 0).
    require_triton()
    module = import_seed("decode_attention", "triton_split_k")
    shape = {"B": 2, "Hq": 8, "Hkv": 2, "L": 400, "D": 32}
    q, k, v, _ = _inputs(shape, seed=5)
    for lengths in ((400, 37), (208, 400)):
        inputs = (q, k, v, torch.tensor(lengths, dtype=torch.int32))
        _assert_matches(module.kernel(*inputs, SPLITS=13, BLOCK_L=16), inputs)


def test_split_k_one_wave_rule_counts_programs_that_fit_an_sm():
    # SPLITS = -1: pieces for one wave of the programs that fit an SM by shared memory. The Llama tile (16
    # heads x 128, 64 positions, keys and values in two stages) is ~70 KB for sm_90: 3 per SM, 396 on 132
    # SMs; B = 1 with 8 kv heads then takes 49 pieces (392 programs), where the default asks for 66 (528).
    require_triton()
    module = import_seed("decode_attention", "triton_split_k")
    cpu = torch.device("cpu")  # no SM count to ask: an H100 / H200's 132
    assert module._programs_per_sm(16, 128, 64, same_kv=False) == 3
    assert module._programs_per_sm(16, 128, 32, same_kv=False) == 4  # at most _PROGRAMS_PER_SM
    assert module._split_count(8, 32768, 64, cpu, -1, 4, per_sm=3) == 49
    assert module._split_count(8, 32768, 64, cpu, 0, 4) == 66
    assert module._split_count(8, 4096, 64, cpu, -1, 4, per_sm=3) == 16  # at least 4 blocks a piece
    assert module._split_count(512, 4096, 64, cpu, -1, 4, per_sm=3) == 1  # a batch that fills the GPU
    assert module._split_count(8, 32768, 64, cpu, 32, 4) == 32  # a number asked for is taken as it is
