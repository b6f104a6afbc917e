"""The cuda_cluster top-p seed (CUDA C++, thread-block clusters): on a GPU, the nucleus it samples from is
the exact float64 nucleus (the checks of tests/test_task_top_p_split_row.py, reused) on random rows, edge
rows and every config; its draws pass the task's rule at the task's shapes, match the nucleus frequencies,
replay under a CUDA graph and pass the judge. On the CPU: its keys order floats as the kernel's do, and
its SPACE holds the task's widest row (the first call's build error is in tests/test_cuda_build.py).
"""

from pathlib import Path

import pytest
import torch
from scipy import stats

from ratchet.candidate import load_candidate
from ratchet.task import BUILTIN_TASKS_DIR, ShapeSet
from seed_files import import_seed
from test_task_top_p_split_row import TASK, _edge_cases, _random_case, assert_exact, exact_nucleus
from test_task_top_p_split_row import test_deterministic_under_manual_seed as _deterministic_under_manual_seed
# GPU checks that hold for any top-p seed, collected here a second time: pytest gives them this module's `seed`.
from test_task_top_p_split_row import test_gpu_cuda_graph_replays, test_gpu_rule_at_task_shapes  # noqa: F401
from test_task_top_p_split_row import test_gpu_every_config_passes_the_rule  # noqa: F401

PATH = BUILTIN_TASKS_DIR / "top_p_sampling" / "seeds" / "cuda_cluster.py"


@pytest.fixture(scope="module")
def seed():
    return import_seed("top_p_sampling", "cuda_cluster")


def test_order_keys_sort_floats_and_tie_signed_zeros(seed):
    x = torch.tensor([1.0, -0.0, 0.0, -1.0, float("-inf"), float("inf"), 3e38, -2.5, 1e-45, -1e-45])
    keys = seed.order_keys(x)
    assert keys[1] == keys[2]  # -0.0 and +0.0 are one key, as they are one logit to the task
    assert keys[4] == 0x007FFFFF and keys[5] == 0xFF800000  # the kernel's kMinKey and kMaxKey
    for i in range(len(x)):
        for j in range(len(x)):
            assert bool(keys[i] < keys[j]) == bool(x[i] < x[j]), (float(x[i]), float(x[j]))


def test_every_config_holds_the_widest_row():
    configs = load_candidate(PATH).valid_configs()
    assert configs[0] == load_candidate(PATH).default_config()
    # Clusters of 8: 256 threads with three splits of registers and shared memory, 512 with all six;
    # clusters of 4: the three 512-thread splits that hold 64 or more logits a thread.
    assert len(configs) == 12
    for c in configs:
        assert c["THREADS"] * (c["PER_THREAD"] + c["SMEM_PER_THREAD"]) * c["MAX_CLUSTER"] >= 129280, c


# --- on a GPU ---------------------------------------------------------------------------------------------
def _cuda(*tensors):
    return [t.cuda() for t in tensors]


CONFIGS = [{}, {"THREADS": 512, "PER_THREAD": 16, "SMEM_PER_THREAD": 16},
           {"THREADS": 256, "PER_THREAD": 16, "SMEM_PER_THREAD": 48}]


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=["default", "512x16+16", "256x16+48"])
def test_gpu_nucleus_is_exact_on_random_rows(seed, config):
    gen = torch.Generator().manual_seed(11)
    checked = 0
    for _ in range(12):
        logits, top_p = _cuda(*_random_case(gen))
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        checked += assert_exact(mask, tokens, logits, top_p)
    assert checked >= 18  # most rows are unambiguous: the equality check really ran


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS[:2], ids=["default", "512x16+16"])
def test_gpu_nucleus_edge_rows(seed, config):
    # Ties across the cut, -inf, flat rows, top_p = 1, V = 1 and 2, huge and tiny spreads, signed zeros,
    # cuts below the first 15-nat window and top_p a few ulps below 1.
    for name, (logits, top_p, size) in _edge_cases().items():
        logits, top_p = _cuda(logits, top_p)
        tokens, mask = seed.nucleus_mask(logits, top_p, **config)
        assert_exact(mask, tokens, logits, top_p)
        if size is not None:
            assert mask.sum(-1).tolist() == [size] * logits.shape[0], name


@pytest.mark.gpu
def test_gpu_top_p_zero_keeps_the_top_tie_group(seed):
    logits, top_p = _cuda(torch.tensor([[1.0, 3.0, 3.0, 2.0, -1.0], [0.5, 0.1, 0.2, 0.3, 0.4]]),
                          torch.tensor([0.0, 1e-9]))
    tokens, mask = seed.nucleus_mask(logits, top_p)
    assert mask.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]
    assert int(tokens[0]) in (1, 2) and int(tokens[1]) == 0


@pytest.mark.gpu
def test_gpu_nucleus_is_exact_at_task_shapes(seed):
    gen = torch.Generator(device="cuda").manual_seed(2)
    for shape in ({"B": 64, "V": 129280}, {"B": 5, "V": 100003}, {"B": 300, "V": 128256}):
        logits, top_p = TASK.make_inputs(shape, torch.float32, "cuda", gen)
        tokens, mask = seed.nucleus_mask(logits, top_p)
        assert assert_exact(mask, tokens, logits, top_p) >= shape["B"] // 2


@pytest.mark.gpu
def test_gpu_draw_frequencies_match_the_nucleus(seed):
    # 64 copies of one row (nucleus of ~10 tokens): chi-square of 1024 draws against the exact
    # renormalized nucleus probabilities.
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(1, 257, generator=gen) * 2.0
    logits, top_p = _cuda(row.repeat(64, 1), torch.full((64,), 0.8))
    keep = exact_nucleus(row, top_p[:1].cpu())[0]
    probs = torch.softmax(row.double(), -1)[0] * keep
    probs /= probs.sum()
    torch.manual_seed(4)
    counts = torch.zeros(257, dtype=torch.float64)
    for _ in range(16):
        counts += torch.bincount(seed.kernel(logits, top_p).cpu(), minlength=257).double()
    assert counts[~keep].sum() == 0
    k = keep.nonzero().squeeze(1)
    assert 5 <= len(k) <= 30
    assert stats.chisquare(counts[k].numpy(), (probs[k] * counts.sum()).numpy()).pvalue > 1e-4


@pytest.mark.gpu
def test_gpu_deterministic_under_manual_seed(seed):
    _deterministic_under_manual_seed(seed, device="cuda")  # the split-row test's rows, on the GPU


@pytest.mark.gpu
def test_gpu_a_row_too_wide_for_a_cluster_is_a_clear_error(seed):
    logits, top_p = torch.zeros(1, 8 * 256 * 64 + 4, device="cuda"), torch.ones(1, device="cuda")
    with pytest.raises(ValueError, match="needs 9 blocks"):
        seed.kernel(logits, top_p)
    with pytest.raises(ValueError, match="fp32 CUDA logits"):
        seed.kernel(logits.double(), top_p)


@pytest.mark.gpu
def test_gpu_judge_passes_it(seed):
    import dataclasses

    from ratchet.judge import evaluate
    from ratchet.judge.evaluation import JudgeOptions

    small = dataclasses.replace(TASK, gpu=ShapeSet(public=[{"B": 64, "V": 129280}, {"B": 3, "V": 100003}]))
    verdict = evaluate(small, load_candidate(Path(seed.__file__)), None, JudgeOptions(device="cuda", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons
