"""The judge on a machine whose cores another process keeps busy: honest candidates still pass, and nothing
is refused as beyond_roofline. On 2026-12-01 ceilings measured on such a machine (with torch's default
threads, while the judge's workers time with one) read 20x low and refused every honest CPU candidate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratchet.candidate import load_candidate
from ratchet.hardware import ceilings as ceil
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.timing import TimingPolicy
from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
AXPBY = str(ROOT / "tests" / "data" / "tasks" / "axpby.py")
CHEAP_HONEST = ROOT / "tests" / "redteam" / "honest" / "h04_output_pool.py"
RMSNORM_SEED = ROOT / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds" / "cpu_torch.py"
QUICK = TimingPolicy(cap_s=0.2, max_reps=40, min_reps=8, target_rse=0.05)
BURN_S = 90  # the burners end by themselves even if the teardown never runs

BURN = f"import time\nend = time.time() + {BURN_S}\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
def busy_cores(tmp_path, monkeypatch):
    """One spinning process per core for the test's duration, killed at teardown; a cold ceilings cache,
    so the judge measures while the cores are busy."""
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    monkeypatch.setattr(ceil, "_MEMO", {})
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 1)]
    time.sleep(0.3)
    try:
        yield burners
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("task, candidate", [("rmsnorm", RMSNORM_SEED), (AXPBY, CHEAP_HONEST)],
                         ids=["rmsnorm-seed", "axpby-output-pool"])
def test_honest_candidates_pass_while_the_cores_are_busy(busy_cores, task, candidate):
    v = evaluate(load_task(task), load_candidate(candidate), None, JudgeOptions(device="cpu", policy=QUICK))
    assert all(p.poll() is None for p in busy_cores), "a burner ended early: the cores were not kept busy"
    codes = [r.code for r in v.reasons]
    assert "beyond_roofline" not in codes, v.reasons
    assert v.verdict == "pass" and codes == [], v.reasons
    timed = [s for s in v.shapes if s.median_us]
    assert timed and all(s.floor_us is not None and s.median_us > s.floor_us for s in timed)


@pytest.mark.parametrize("load, hidden_us, refused", [
    (0.5, 1008.0, True),   # a quiet machine: 1 ms the reference never shows is hidden work
    (4.0, 1008.0, False),  # every core taken: a time slice lost at each wake-up, as measured on 2026-12-02
    (4.0, 6000.0, True),   # taken cores excuse a slice, not 6 ms of work in every call
])
def test_the_outside_clock_allows_a_time_slice_only_when_every_core_is_taken(monkeypatch, load, hidden_us, refused):
    """The lower quartiles of the two workers' per-call overheads differ by ``hidden_us`` with tight IQRs
    (13 us together): the shape of the false reject seen with two suites on two cores."""
    from types import SimpleNamespace

    from ratchet.judge.evaluation import Abort, Evaluation

    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    ref = [50.0 + (i % 4) * 2 for i in range(40)]
    overhead = {"ref": ref, "cand": [x + hidden_us for x in ref]}

    def check():
        Evaluation._clock_check(SimpleNamespace(device="cpu"), 71.6, overhead, {"cand": [], "ref": []}, "shape {'T': 7}")

    if refused:
        with pytest.raises(Abort) as caught:
            check()
        assert [r.code for r in caught.value.reasons] == ["clock_mismatch"]
        assert f"{hidden_us:.0f} us per call seen by the outside clock" in caught.value.reasons[0].detail
    else:
        check()
