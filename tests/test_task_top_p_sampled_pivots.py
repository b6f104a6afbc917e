"""The triton_sampled_pivots top-p seed: the nucleus it samples from is the exact float64 nucleus (the
checks of tests/test_task_top_p_split_row.py, reused), including rows whose candidates overflow the sorted
path, its draws pass the task's rule and match the nucleus frequencies, it is deterministic under
torch.manual_seed, and the judge passes it end to end. Triton's interpreter runs it without a GPU.
"""

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import BUILTIN_TASKS_DIR
from seed_files import import_seed, require_triton
from test_task_top_p_split_row import RULE, TASK, _collect, _edge_cases, _random_case, assert_exact
# Checks that hold for any top-p seed, collected here a second time: pytest gives them this module's `seed`.
from test_task_top_p_split_row import (test_deterministic_under_manual_seed,  # noqa: F401
                                       test_draw_frequencies_match_the_nucleus, test_gpu_cuda_graph_replays,
                                       test_gpu_rule_at_task_shapes, test_judge_passes_it_end_to_end)

PATH = BUILTIN_TASKS_DIR / "top_p_sampling" / "seeds" / "triton_sampled_pivots.py"


@pytest.fixture(scope="module")
def seed():
    require_triton()
    return import_seed("top_p_sampling", "triton_sampled_pivots")


def test_nucleus_is_exact_on_random_rows(seed):
    gen = torch.Generator().manual_seed(11)
    checked = 0
    for _ in range(8):
        logits, top_p = _random_case(gen)
        tokens, mask = seed.nucleus_mask(logits, top_p)
        checked += assert_exact(mask, tokens, logits, top_p)
    assert checked >= 12  # most rows are unambiguous: the equality check really ran


def test_nucleus_edge_rows(seed):
    for name, (logits, top_p, size) in _edge_cases().items():
        tokens, mask = seed.nucleus_mask(logits, top_p)
        assert_exact(mask, tokens, logits, top_p)
        if size is not None:
            assert mask.sum(-1).tolist() == [size] * logits.shape[0], name


def test_more_candidates_than_the_sorted_path_holds(seed):
    # 1500 tied logits at the top (more than the 1024 that _finish sorts): the slow path's bisection over
    # keys. Ties are all in or all out; the second row's cut falls inside a long run of distinct values.
    gen = torch.Generator().manual_seed(6)
    tied = torch.cat([torch.zeros(1500), -3 - torch.rand(2500, generator=gen)])
    run = torch.cat([torch.full((5,), 2.0), -1e-4 * torch.arange(3000.0), -20 - torch.rand(999, generator=gen)])
    logits = torch.stack([tied, run[torch.randperm(4004, generator=gen)][:4000]])
    tokens, mask = seed.nucleus_mask(logits, torch.tensor([0.5, 0.5]))
    assert_exact(mask, tokens, logits, torch.tensor([0.5, 0.5]))
    assert int(mask[0].sum()) == 1500  # the cut falls inside the tie group (95% of the mass): all of it
    tokens, mask = seed.nucleus_mask(logits, torch.tensor([0.99, 0.9]))
    assert_exact(mask, tokens, logits, torch.tensor([0.99, 0.9]))


def test_top_p_zero_keeps_the_top_tie_group(seed):
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, -1.0], [0.5, 0.1, 0.2, 0.3, 0.4]])
    tokens, mask = seed.nucleus_mask(logits, torch.tensor([0.0, 1e-9]))
    assert mask.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]
    assert tokens[0] in (1, 2) and tokens[1] == 0


@pytest.mark.parametrize("shape,draws", [({"B": 9, "V": 4099}, 36)], ids=["B9xV4099"])
def test_draws_pass_the_task_rule(seed, shape, draws):
    assert RULE.test(_collect(seed.kernel, shape, draws)) == []


def test_every_config_is_exact(seed):
    # The interpreter ignores num_warps: one run per distinct (BLOCK, PROGRAMS).
    candidate = load_candidate(PATH)
    configs = candidate.valid_configs()
    assert configs[0] == candidate.default_config()
    gen = torch.Generator().manual_seed(21)
    logits = torch.randn(3, 1531, generator=gen) * torch.tensor([[0.4], [2.0], [8.0]])
    top_p = torch.tensor([0.9, 0.5, 1.0])
    seen = set()
    for config in configs:
        key = (config["BLOCK"], config["PROGRAMS"])
        if key in seen:
            continue
        seen.add(key)
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        assert assert_exact(mask, tokens, logits, top_p) >= 2, config
    assert len(seen) == 9


# --- on a GPU: the task's shapes, the full draw count, CUDA graphs -------------------------------------
@pytest.mark.gpu
def test_gpu_nucleus_is_exact_at_task_shapes(seed):
    gen = torch.Generator(device="cuda").manual_seed(2)
    for config in load_candidate(PATH).valid_configs()[:3]:
        for shape in ({"B": 64, "V": 129280}, {"B": 5, "V": 100003}, {"B": 256, "V": 128256}):
            logits, top_p = TASK.make_inputs(shape, torch.float32, "cuda", gen)
            tokens, mask = seed.nucleus_mask(logits, top_p, **config)
            assert assert_exact(mask, tokens, logits, top_p) >= shape["B"] // 2
