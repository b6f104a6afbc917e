"""The triton_split_row top-p seed: the nucleus it samples from is the exact float64 nucleus, its draws
pass the task's statistical rule and match the nucleus frequencies, it is deterministic under
torch.manual_seed, and the judge passes it end to end.

Without a GPU, Triton's interpreter runs it (tests/conftest.py): ~3 s per call at B=64, so the CPU
checks use small shapes and fewer draws than the judge's min_draws (the KS test is valid at any count;
every token's membership is checked). The GPU checks run the task's shapes and the full count.
"""

import dataclasses
from pathlib import Path

import pytest
import torch
from scipy import stats

from ratchet.candidate import load_candidate
from ratchet.task import BUILTIN_TASKS_DIR, ShapeSet, load_task
from seed_files import import_seed, require_triton

TASK = load_task("top_p_sampling")
RULE = TASK.check
PATH = BUILTIN_TASKS_DIR / "top_p_sampling" / "seeds" / "triton_split_row.py"
BAND = 1e-6  # rows whose cut moves within this much mass are "ambiguous": fp32 sums may land either way
CONFIGS = [{}, {"BLOCK": 256, "PROGRAMS": 512, "CELLS": 8, "SUBCELLS": 32, "num_warps": 8},
           {"BLOCK": 1024, "PROGRAMS": 2048, "CELLS": 16, "SUBCELLS": 16, "num_warps": 16}]


@pytest.fixture(scope="module")
def seed():
    require_triton()
    return import_seed("top_p_sampling", "triton_split_row")


def exact_nucleus(logits, top_p, tol=0.0):
    """Float64 nucleus as the task defines it: token i is in when the mass of the tokens strictly more
    probable than it is below top_p + tol (tied logits share that mass, so ties are all in or out)."""
    x = logits.double().cpu()
    xs, order = x.sort(dim=-1, descending=True)
    ps = torch.softmax(x, dim=-1).gather(-1, order)
    before = ps.cumsum(dim=-1) - ps
    ranks = torch.arange(x.shape[-1]).expand_as(xs)
    new = torch.ones_like(xs, dtype=torch.bool)
    new[:, 1:] = xs[:, 1:] != xs[:, :-1]
    start = torch.cummax(torch.where(new, ranks, 0), dim=-1).values  # first rank of each tie group
    keep = before.gather(-1, start) < top_p.double().cpu()[:, None] + tol
    return torch.zeros_like(keep).scatter_(-1, order, keep)


def assert_exact(mask, tokens, logits, top_p):
    """The kernel's nucleus equals the float64 one on every row whose cut is clear by BAND of mass,
    lies between the two within BAND elsewhere, is a threshold set, and holds the sampled token."""
    mask, tokens, logits = mask.cpu(), tokens.cpu(), logits.cpu()
    lo, hi, ex = (exact_nucleus(logits, top_p, tol) for tol in (-BAND, BAND, 0.0))
    for r in range(logits.shape[0]):
        where = (f"row {r}: V={logits.shape[1]} top_p={float(top_p[r]):.8f} size {int(mask[r].sum())}, "
                 f"exact {int(ex[r].sum())}")
        assert bool(mask[r, tokens[r]]), f"sampled token {int(tokens[r])} outside the kernel's own nucleus, {where}"
        assert torch.isfinite(logits[r, tokens[r]]), where
        if torch.equal(lo[r], hi[r]):
            assert torch.equal(mask[r], ex[r]), where
        else:
            assert not (lo[r] & ~mask[r]).any() and not (mask[r] & ~hi[r]).any(), where
        inside, outside = logits[r][mask[r]], logits[r][~mask[r]]
        if len(outside):
            assert inside.min() > outside.max(), f"not a threshold set, {where}"
    return int((lo == hi).all(dim=-1).sum())  # rows checked for equality


def _random_case(gen):
    B, V = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(8, 1500, (1,), generator=gen)) * 2 + 1
    spread = float(torch.empty(1).uniform_(-1.2, 2.3, generator=gen).exp())  # logits std 0.3 .. 10
    logits = torch.randn(B, V, generator=gen) * spread
    top_p = 0.05 + 0.95 * torch.rand(B, generator=gen)
    top_p[torch.rand(B, generator=gen) < 0.2] = 1.0
    return logits, top_p


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "cells8x32", "block1024"])
def test_nucleus_is_exact_on_random_rows(seed, config):
    gen = torch.Generator().manual_seed(11)
    checked = 0
    for _ in range(8):
        logits, top_p = _random_case(gen)
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        checked += assert_exact(mask, tokens, logits, top_p)
    assert checked >= 12  # most rows are unambiguous: the equality check really ran


def _edge_cases():
    g = torch.Generator().manual_seed(5)
    tail = torch.cat([torch.zeros(1), -17 - 0.001 * torch.arange(2000.0)])  # a tail 17 nats down
    return {
        # tied tokens straddle top_p: the mass above them (0.73) is below 0.75, so all four are in
        "ties_straddle": (torch.tensor([[3.0, 3, 1, 1, 1, 1, 0, 0, 0, 0]]).repeat(3, 1), torch.full((3,), 0.75), 6),
        "ties_at_cut": (torch.tensor([[5.0, 4, 4, 4, 2, 2, 2, 2, 2, 0]]), torch.tensor([0.99]), 9),
        "one_finite": (torch.tensor([[0.0] + [-float("inf")] * 9]).repeat(2, 1), torch.tensor([0.3, 0.9]), 1),
        "flat": (torch.zeros(2, 777), torch.tensor([0.3, 1.0]), 777),
        "top_p_1": (torch.randn(2, 501, generator=g) * 3, torch.ones(2), 501),
        "V1": (torch.randn(3, 1, generator=g), torch.rand(3, generator=g), 1),
        "V2": (torch.randn(3, 2, generator=g), torch.rand(3, generator=g), None),
        "one_token": (torch.cat([torch.full((1, 1), 20.0), torch.randn(1, 2000, generator=g)], 1), torch.tensor([0.9]),
                      1),
        "peaked": (torch.randn(3, 2999, generator=g) * 30, torch.tensor([0.3, 0.9, 0.999]), None),
        "huge_logits": (torch.randn(2, 1001, generator=g) * 1e30, torch.tensor([0.5, 0.9]), 1),
        "wide_logits": (torch.randn(2, 1001, generator=g) * 1e4, torch.tensor([0.5, 0.999]), None),
        "tiny_spread": (1 + torch.randn(2, 2501, generator=g) * 1e-6, torch.tensor([0.3, 0.7]), None),
        "signed_zeros": (torch.tensor([[1.0, 0.0, -0.0, 0.0, -0.0, -1.0, -2.0]]), torch.tensor([0.5]), 5),
        # the cut falls below the 16-nat coarse window: the slow but exact path
        "below_window": (torch.stack([tail, tail[torch.randperm(2001, generator=g)]]), torch.tensor([0.99999, 0.99995]),
                         None),
        "near_one": (torch.randn(3, 2999, generator=g) * 8, torch.tensor([0.99999994, 0.9999999, 0.999999]), None),
    }


@pytest.mark.parametrize("config", CONFIGS[:2], ids=["default", "cells8x32"])
def test_nucleus_edge_rows(seed, config):
    for name, (logits, top_p, size) in _edge_cases().items():
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        assert_exact(mask, tokens, logits, top_p)
        if size is not None:
            assert mask.sum(-1).tolist() == [size] * logits.shape[0], name


def test_top_p_zero_keeps_the_top_tie_group(seed):
    # The spec's nucleus is empty at top_p = 0 (the reference would fail); the kernel keeps the argmax group.
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, -1.0], [0.5, 0.1, 0.2, 0.3, 0.4]])
    tokens, mask = seed.nucleus_mask(logits, torch.tensor([0.0, 1e-9]))
    assert mask.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]
    assert tokens[0] in (1, 2) and tokens[1] == 0


def _collect(fn, shape, draws, seed=0):
    """(inputs, outputs) pairs from the task's own inputs, fresh per call, as the judge pools them."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 1)
    pairs, n = [], 0
    while n < draws:
        logits, top_p = TASK.make_inputs(shape, torch.float32, "cpu", gen)
        pairs.append(((logits, top_p), (fn(logits, top_p),)))
        n += RULE.draws(shape)
    return pairs


# One row, and rows over several blocks. Many rows at once go through the rule in the judge's own run
# (test_judge_passes_it_end_to_end, 32 rows) and through the frequency check (64).
@pytest.mark.parametrize("shape,draws", [({"B": 1, "V": 1000}, 48), ({"B": 9, "V": 4099}, 36)],
                         ids=["B1xV1000", "B9xV4099"])
def test_draws_pass_the_task_rule(seed, shape, draws):
    assert RULE.test(_collect(seed.kernel, shape, draws)) == []


def test_draw_frequencies_match_the_nucleus(seed):
    # 64 copies of one row (nucleus of ~10 tokens): chi-square of 256 draws against the exact
    # renormalized nucleus probabilities. A 1.3x temperature error or a missing tail token fails it.
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(1, 257, generator=gen) * 2.0
    logits, top_p = row.repeat(64, 1), torch.full((64,), 0.8)
    keep = exact_nucleus(row, top_p[:1])[0]
    probs = torch.softmax(row.double(), -1)[0] * keep
    probs /= probs.sum()
    torch.manual_seed(4)
    counts = torch.zeros(257, dtype=torch.float64)
    for _ in range(4):
        counts += torch.bincount(seed.kernel(logits, top_p), minlength=257).double()
    assert counts[~keep].sum() == 0
    k = keep.nonzero().squeeze(1)
    assert 5 <= len(k) <= 30
    assert stats.chisquare(counts[k].numpy(), (probs[k] * counts.sum()).numpy()).pvalue > 1e-4


def test_deterministic_under_manual_seed(seed, device="cpu"):
    gen = torch.Generator().manual_seed(8)
    logits = (torch.randn(16, 301, generator=gen) * 0.5).to(device)  # big nuclei
    top_p = torch.full((16,), 0.9, device=device)
    draws = []
    for s in (7, 7, 8):
        torch.manual_seed(s)
        draws.append(seed.kernel(logits, top_p))
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


def test_every_config_is_exact(seed):
    # The interpreter ignores num_warps: one run per distinct (BLOCK, PROGRAMS, CELLS, SUBCELLS).
    candidate = load_candidate(PATH)
    configs = candidate.valid_configs()
    assert configs[0] == candidate.default_config()
    assert 20 <= len(configs) <= 80
    gen = torch.Generator().manual_seed(21)
    logits = torch.randn(3, 1531, generator=gen) * torch.tensor([[0.4], [2.0], [8.0]])
    top_p = torch.tensor([0.9, 0.5, 1.0])
    seen = set()
    for config in configs:
        key = tuple(v for k, v in config.items() if k != "num_warps")
        if key in seen:
            continue
        seen.add(key)
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        assert assert_exact(mask, tokens, logits, top_p) >= 2, config


def test_judge_passes_it_end_to_end(seed):
    # The whole judge on the CPU (worker, guards, output checks, the statistical rule) on one small shape
    # with 64 draws: the task's CPU set needs 2048 draws per shape, ~10 minutes under the interpreter.
    # The seed's file comes from the fixture, so other top-p seeds' test files collect this test too.
    from ratchet.judge import evaluate
    from ratchet.judge.evaluation import JudgeOptions

    small = dataclasses.replace(TASK, cpu=ShapeSet(public=[{"B": 32, "V": 999}]),
                                check=dataclasses.replace(RULE, min_draws=64, max_calls=4))
    candidate = load_candidate(Path(seed.__file__))
    verdict = evaluate(small, candidate, None, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons


# --- on a GPU: the task's shapes, the full draw count, CUDA graphs -------------------------------------
GPU_SHAPES = [{"B": 1, "V": 128256}, {"B": 64, "V": 129280}, {"B": 37, "V": 100003}, {"B": 256, "V": 32000}]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: f"B{s['B']}xV{s['V']}")
def test_gpu_rule_at_task_shapes(seed, shape):
    gen = torch.Generator(device="cuda").manual_seed(0)
    torch.manual_seed(1)
    pairs, n = [], 0
    while n < RULE.min_draws:
        logits, top_p = TASK.make_inputs(shape, torch.float32, "cuda", gen)
        pairs.append(((logits.cpu(), top_p.cpu()), (seed.kernel(logits, top_p).cpu(),)))
        n += shape["B"]
    assert RULE.test(pairs) == []


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=["default", "cells8x32", "block1024"])
def test_gpu_nucleus_is_exact_at_task_shapes(seed, config):
    gen = torch.Generator(device="cuda").manual_seed(2)
    for shape in ({"B": 64, "V": 129280}, {"B": 5, "V": 100003}):
        logits, top_p = TASK.make_inputs(shape, torch.float32, "cuda", gen)
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        assert assert_exact(mask, tokens, logits, top_p) >= shape["B"] // 2


@pytest.mark.gpu
def test_gpu_every_config_passes_the_rule(seed):
    # The seed's file from the fixture: other top-p seeds' test files collect this test too.
    shape = {"B": 256, "V": 32003}
    for config in load_candidate(Path(seed.__file__)).valid_configs():
        gen = torch.Generator(device="cuda").manual_seed(3)
        pairs = []
        for _ in range(RULE.min_draws // shape["B"]):
            logits, top_p = TASK.make_inputs(shape, torch.float32, "cuda", gen)
            pairs.append(((logits.cpu(), top_p.cpu()), (seed.kernel(logits, top_p, **config).cpu(),)))
        assert RULE.test(pairs) == [], config


@pytest.mark.gpu
def test_gpu_cuda_graph_replays(seed):
    # Capturable: no host sync, fixed launches; each replay draws anew from torch's graph-safe RNG.
    gen = torch.Generator(device="cuda").manual_seed(4)
    logits, top_p = TASK.make_inputs({"B": 64, "V": 129280}, torch.float32, "cuda", gen)
    seed.kernel(logits, top_p)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = seed.kernel(logits, top_p)
    fresh = TASK.make_inputs({"B": 64, "V": 129280}, torch.float32, "cuda", gen)
    logits.copy_(fresh[0])
    top_p.copy_(fresh[1])
    keep = exact_nucleus(logits, top_p, 1e-5)
    draws = []
    for _ in range(3):
        graph.replay()
        assert keep[torch.arange(64), out.cpu()].all()
        draws.append(out.clone())
    assert not torch.equal(draws[0], draws[1])  # same inputs, new random numbers
