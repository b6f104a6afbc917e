"""Large inputs come back from the worker as a keyed fingerprint instead of their bytes: equal bytes give
equal fingerprints (in any summation order, on any device), any change is seen, and the judge keys it
with its own seed, never one the worker names."""

import dataclasses
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.check import (FINGERPRINT_MIN_BYTES, FINGERPRINT_MIN_BYTES_GPU, fingerprinted,
                                 input_fingerprint, inputs_unchanged)
from ratchet.judge.worker import describe_input
from ratchet.task import ShapeSet, load_task

TESTS = Path(__file__).parent
BIG = FINGERPRINT_MIN_BYTES // 4 + 1001  # float32 elements: just over the threshold, odd


def test_fingerprint_sees_every_change_and_depends_on_the_key():
    x = torch.randn(BIG, generator=torch.Generator().manual_seed(0))
    key = 123456789
    print_ = input_fingerprint(x, key)
    assert print_ == input_fingerprint(x.clone(), key)
    assert print_ != input_fingerprint(x, key + 1)
    for index in (0, BIG // 2, BIG - 1):  # first, middle and last word (the tail chunk too)
        changed = x.clone()
        changed[index] = torch.nextafter(changed[index], torch.tensor(float("inf")))  # one ulp
        assert input_fingerprint(changed, key) != print_
    odd_bytes = torch.arange(7, dtype=torch.uint8)  # not a whole number of 32-bit words
    assert input_fingerprint(odd_bytes, key) != input_fingerprint(odd_bytes.flip(0), key)


def test_the_threshold_is_far_lower_off_the_cpu():
    # On a GPU bytes cross to the host and back: a top-p call's 512 KB of logits go as a fingerprint.
    # "meta" stands for any device but the CPU (no data needed to ask).
    logits = 128256 * 4
    assert not fingerprinted(torch.empty(logits, dtype=torch.uint8))
    assert fingerprinted(torch.empty(FINGERPRINT_MIN_BYTES, dtype=torch.uint8))
    assert fingerprinted(torch.empty(logits, dtype=torch.uint8, device="meta"))
    assert not fingerprinted(torch.empty(FINGERPRINT_MIN_BYTES_GPU - 1, dtype=torch.uint8, device="meta"))


def test_large_inputs_travel_as_fingerprints_keyed_by_the_judge():
    x = torch.randn(BIG)
    small = torch.randn(1000)
    key = 42
    desc = describe_input(x, key)
    assert set(desc) == {"shape", "fingerprint"} and desc["shape"] == [BIG]
    assert "data" in describe_input(small, key) and "data" in describe_input(x, None)
    assert inputs_unchanged((x, small), [desc, describe_input(small, key)], "l", key) == []
    mutated = x.clone()
    mutated[-1] = 0.0
    assert [r.code for r in inputs_unchanged((mutated,), [desc], "l", key)] == ["input_mutated"]
    # A worker that names its own key is not believed: the judge's key is the one used.
    forged = dict(desc, fingerprint=input_fingerprint(mutated, 7), fingerprint_seed=7)
    assert [r.code for r in inputs_unchanged((x,), [forged], "l", key)] == ["input_mutated"]
    assert [r.code for r in inputs_unchanged((x,), [desc], "l", None)] == ["input_mutated"]


@pytest.mark.slow
def test_judge_sees_a_large_input_mutated():
    """End to end on the CPU: axpby at a size whose inputs come back as fingerprints."""
    axpby = load_task(str(TESTS / "data" / "tasks" / "axpby.py"))
    task = dataclasses.replace(axpby, cpu=ShapeSet(public=[{"N": BIG}]))
    options = JudgeOptions(device="cpu", time_it=False)
    cheat = evaluate(task, load_candidate(TESTS / "redteam" / "cheats" / "p03_zero_inputs.py"), None, options)
    assert cheat.verdict == "fail" and [r.code for r in cheat.reasons] == ["input_mutated"], cheat.reasons
    # The honest twin uses an input as scratch space and restores it before returning.
    honest = evaluate(task, load_candidate(TESTS / "data" / "candidates" / "axpby_honest.py"), None, options)
    assert honest.verdict == "pass", honest.reasons
    restored = evaluate(task, load_candidate(TESTS / "redteam" / "honest" / "h03_restore_scratch.py"), None, options)
    assert restored.verdict == "pass", restored.reasons
