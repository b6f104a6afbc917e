"""Fault injection on the GPU (marked ``gpu``: skipped without CUDA). Each fault through the real judge,
then an honest candidate in the same process: a CUDA fault does not poison the next evaluation, and the
device memory a worker held is back after it ends. Each test runs with forked and with executed workers.

    PYTHONPATH=src python -m pytest -q tests/faults/test_faults_gpu.py
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, Limits, evaluate
from ratchet.task import load_task

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
TASK = load_task(str(HERE.parent / "data" / "tasks" / "axpby.py"))
# The first call compiles (Triton) outside the 10 s of running it may take.
GPU = JudgeOptions(device="cuda", time_it=False, limits=Limits(first_call_s=10, call_floor_s=5, call_s=10))


@pytest.fixture(autouse=True, params=["1", "0"], ids=["forked", "executed"])
def worker_start(request, monkeypatch):
    """Every fault both ways: workers forked from the fork server and workers executed afresh."""
    monkeypatch.setenv("RATCHET_FORKSERVER", request.param)


def judge(name: str, options: JudgeOptions = GPU):
    return evaluate(TASK, load_candidate(CANDIDATES / f"{name}.py"), None, options)


def codes(verdict) -> list[str]:
    return [r.code for r in verdict.reasons]


def honest_passes():
    v = judge("honest")
    assert v.verdict == "pass" and v.reasons == [], v.reasons


def device_used_bytes() -> int:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def test_illegal_address_is_a_crash_with_cudas_own_message():
    v = judge("gpu_illegal_address")
    assert v.verdict == "error" and codes(v) == ["crash"], v.reasons
    assert "illegal memory access" in v.reasons[0].detail, v.reasons[0].detail
    assert "RuntimeWarning" not in v.reasons[0].detail
    honest_passes()


def test_a_spinning_gpu_kernel_costs_the_call_limit():
    started = time.monotonic()
    v = judge("gpu_spin")
    assert v.verdict == "error" and codes(v) == ["timeout"], v.reasons
    assert "hang: no return within 10.0 s (first-call limit" in v.reasons[0].detail
    assert time.monotonic() - started < 120  # worker start, Triton's compile, 10 s of spinning, the kill
    honest_passes()


def test_gpu_memory_exhaustion_is_out_of_memory():
    v = judge("gpu_oom")
    assert v.verdict == "error" and codes(v) == ["out_of_memory"], v.reasons
    honest_passes()


def test_leaked_gpu_memory_is_back_after_the_evaluation():
    honest_passes()  # this process's own CUDA context and the judge's references exist from here on
    before = device_used_bytes()
    v = judge("gpu_leak")
    assert v.verdict == "pass", v.reasons
    deadline = time.monotonic() + 10
    while device_used_bytes() - before > 256 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert device_used_bytes() - before <= 256 * 2**20
