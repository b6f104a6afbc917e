"""Timed outputs of sampling tasks are judged pooled, and the two top-p seed configs that failed
``timed_output_wrong`` on the H200 (2026-12-01: ``triton_pivot`` with RADIX_BITS=2, ``triton_sampled_pivots``
with PROGRAMS=512) pass.

The cause found without a GPU: the judge applied the task's statistical rule to each verified timed call on
its own. Its KS test rejects an honest sampler at its false-reject rate (1e-4) per application, and the
H200 checks hundreds of timed calls per shape, so an evaluation's false-reject rate grew to several per
cent; both configs are exact under the interpreter (tests/test_task_top_p*.py). Now the rule is applied
once per shape and timing mode to all the verified timed calls pooled.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.timing import TimingPolicy
from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
WIDE = str(ROOT / "tests" / "redteam" / "tasks" / "top_p_wide.py")
SEEDS = ROOT / "src" / "ratchet" / "tasks" / "top_p_sampling" / "seeds"
QUICK = TimingPolicy(cap_s=0.25, max_reps=48, min_reps=8, target_rse=0.05, verify_fraction=1.0)


def test_the_statistical_rule_is_applied_once_per_timed_shape(tmp_path):
    """Every timed call is verified (verify_fraction 1), yet the rule runs once per shape for correctness
    and once per shape for timing, with all of that shape's timed draws."""
    task = load_task(WIDE)
    applications = []

    def counting(pairs):
        applications.append(len(pairs))
        return task.check.test(pairs)

    counted = replace(task, check=replace(task.check, test=counting))
    v = evaluate(counted, load_candidate(SEEDS / "cpu_sort.py"), None, JudgeOptions(device="cpu", policy=QUICK))
    assert v.verdict == "pass" and v.reasons == [], v.reasons
    shapes = len(task.shape_set("cpu").public)
    assert len(applications) == 2 * shapes, applications
    timed = applications[shapes:]
    assert all(n >= QUICK.min_reps for n in timed), timed  # each pooled every timed call of its shape


def test_a_sampler_wrong_only_in_timed_calls_still_fails(tmp_path):
    """Pooling does not let a cheat through: greedy draws in every call after the correctness phase."""
    cheat = tmp_path / "greedy_when_timed.py"
    cheat.write_text(
        "import torch\n"
        "_CALLS = [0]\n"
        "def kernel(logits, top_p):\n"
        "    _CALLS[0] += 1\n"
        "    if _CALLS[0] > 16:\n"  # two shapes of 8 correctness calls each, then warm-up and timing
        "        return logits.argmax(-1)\n"
        "    probs = torch.softmax(logits, -1)\n"
        "    p, order = probs.sort(-1, descending=True)\n"
        "    p = p.masked_fill(p.cumsum(-1) - p >= top_p[:, None], 0.0)\n"
        "    return order.gather(-1, torch.multinomial(p, 1)).squeeze(-1)\n")
    task = load_task(WIDE)
    v = evaluate(task, load_candidate(cheat), None, JudgeOptions(device="cpu", policy=QUICK))
    assert v.verdict == "fail" and "timed_output_wrong" in {r.code for r in v.reasons}, v.reasons


@pytest.mark.gpu
@pytest.mark.parametrize("seed, config", [
    ("triton_pivot.py", {"BLOCK_V": 1024, "RADIX_BITS": 2, "num_warps": 8}),
    ("triton_sampled_pivots.py", {"BLOCK": 256, "PROGRAMS": 512, "num_warps": 4}),
])
def test_the_configs_that_failed_on_the_h200_pass(seed, config):
    """Exactly the failed configs, judged as the run judged them: the built-in task, the GPU policy."""
    v = evaluate(load_task("top_p_sampling"), load_candidate(SEEDS / seed), config, JudgeOptions(device="cuda"))
    assert v.verdict == "pass" and v.reasons == [], v.reasons
