"""Measured ceilings: keyed, dated and robust measurements that can only make a verdict stricter after a
re-check. A ceiling cached too low (measured on a busy machine with the wrong thread count) once refused
every honest CPU candidate as beyond_roofline; here such a cache is planted and must be replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.hardware import ceilings as ceil
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.evaluation import Abort, Evaluation
from ratchet.judge.timing import TimingPolicy
from ratchet.judge.verdict import ShapeResult, Verdict
from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
AXPBY = str(ROOT / "tests" / "data" / "tasks" / "axpby.py")
HONEST_AXPBY = ROOT / "tests" / "redteam" / "honest" / "h05_joined_threads.py"
ZERO_TIME = ROOT / "tests" / "redteam" / "cheats" / "p20_one_shape_zero_time.py"
RMSNORM_SEED = ROOT / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds" / "cpu_torch.py"
QUICK = TimingPolicy(cap_s=0.25, max_reps=48, min_reps=8, target_rse=0.05)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache file and an empty in-process memo for one test."""
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    monkeypatch.setattr(ceil, "_MEMO", {})
    return tmp_path / "ceilings.json"


def fake(copy_tbps=0.1, matmul_tflops=0.05, trusted=True, age_s=0.0, **over) -> ceil.Ceilings:
    """Ceilings of this machine's CPU key, as a measurement would make them."""
    name, driver = ceil.device_identity("cpu")
    now = time.time() - age_s
    c = ceil.Ceilings(name, driver, copy_tbps, matmul_tflops, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                      "fake", torch_version=torch.__version__, threads=ceil.JUDGE_CPU_THREADS, host=ceil.host_id(),
                      measured_unix=now, trusted=trusted, busy="" if trusted else "busy (fake)")
    return replace(c, **over)


def plant(path: Path, *entries: ceil.Ceilings):
    path.write_text(json.dumps({c.key: asdict(c) for c in entries}))


def test_the_key_names_device_driver_torch_threads_and_host():
    key = ceil.current_key("cpu")
    name, driver = ceil.device_identity("cpu")
    assert key == ceil.identity_key(name, driver, torch.__version__, ceil.JUDGE_CPU_THREADS, ceil.host_id())
    assert key.startswith(name) and f"torch {torch.__version__}" in key and "threads 1" in key
    assert ceil.host_id() in key and ceil.current_key("cpu", threads=4) != key


def test_a_measurement_times_as_the_workers_do(cache, monkeypatch):
    """One torch thread (the judge's CPU workers' count), restored afterwards; rates positive; dated; keyed."""
    seen = []
    real = ceil._cpu_round_s

    def spy(fn, rounds, reps):
        seen.append(torch.get_num_threads())
        return real(fn, rounds, reps)

    monkeypatch.setattr(ceil, "_cpu_round_s", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        c = ceil.measure("cpu", *ceil.device_identity("cpu"), threads=ceil.JUDGE_CPU_THREADS)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {ceil.JUDGE_CPU_THREADS}
    assert len(seen) == 6  # four copy sizes and two matmul sizes, each several rounds
    assert c.copy_tbps > 0 and c.matmul_tflops > 0 and 0 <= c.spread <= 1
    assert c.key == ceil.current_key("cpu") and abs(c.age_s()) < 60
    assert c.measured_at.endswith("Z") and c.threads == 1


def test_a_usable_entry_is_used_and_nothing_is_measured(cache, monkeypatch):
    planted = fake(copy_tbps=0.123)
    plant(cache, planted)
    monkeypatch.setattr(ceil, "measure", lambda *a, **k: pytest.fail("measured despite a usable entry"))
    assert ceil.get_ceilings("cpu").copy_tbps == 0.123


@pytest.mark.parametrize("bad, why", [
    (dict(age_s=ceil.MAX_AGE_S + 3600), "days ago"),
    (dict(age_s=-86400), "days ago"),  # dated in the future: a clock or a hand-written entry
    (dict(copy_tbps=-1.0), "malformed"),
    (dict(copy_tbps=float("nan")), "malformed"),
    (dict(trusted=False), "busy"),
    (dict(threads=2), "another key"),  # stored under this machine's key but measured with two threads
])
def test_an_unusable_entry_is_replaced(cache, monkeypatch, bad, why):
    key = ceil.current_key("cpu")
    entry = asdict(fake(**bad))
    cache.write_text(json.dumps({key: entry}))
    assert why in ceil.entry_problem(key, entry)
    monkeypatch.setattr(ceil, "measure", lambda *a, **k: fake(copy_tbps=0.2))
    assert ceil.get_ceilings("cpu").copy_tbps == 0.2
    assert json.loads(cache.read_text())[key]["copy_tbps"] == 0.2


def test_a_malformed_file_reads_as_empty_and_is_replaced(cache, monkeypatch):
    cache.write_text("{not json")
    monkeypatch.setattr(ceil, "measure", lambda *a, **k: fake(copy_tbps=0.2))
    assert ceil.cached("cpu") is None and ceil.get_ceilings("cpu").copy_tbps == 0.2
    assert list(json.loads(cache.read_text())) == [ceil.current_key("cpu")]


def test_an_untrusted_measurement_is_used_but_never_cached(cache, monkeypatch):
    monkeypatch.setattr(ceil, "measure", lambda *a, **k: fake(copy_tbps=0.01, trusted=False))
    c = ceil.get_ceilings("cpu")
    assert c.copy_tbps == 0.01 and not c.trusted
    assert not cache.exists()
    assert ceil.get_ceilings("cpu") is c  # this process reuses it a while instead of measuring each time


def test_retries_keep_the_best_and_stop_at_a_trusted_one(cache, monkeypatch):
    results = iter([fake(copy_tbps=0.05, trusted=False), fake(copy_tbps=0.04, matmul_tflops=0.09, trusted=True),
                    fake(copy_tbps=9.0)])
    monkeypatch.setattr(ceil, "measure", lambda *a, **k: next(results))
    c = ceil.remeasure_ceilings("cpu", attempts=3)
    assert (c.copy_tbps, c.matmul_tflops, c.trusted) == (0.05, 0.09, True)
    assert json.loads(cache.read_text())[c.key]["copy_tbps"] == 0.05
    assert next(results).copy_tbps == 9.0  # the third attempt was never made


def test_refute_drops_only_the_refuted_numbers(cache):
    c = fake(copy_tbps=0.001)
    plant(cache, c)
    assert not ceil.refute(replace(c, copy_tbps=0.5))  # the file holds other numbers now: kept
    assert ceil.refute(c)
    assert json.loads(cache.read_text()) == {}


@pytest.mark.slow
def test_a_machine_without_a_free_core_is_seen_as_busy(cache):
    """Burners on every core: the measurement says so and is not trusted (so not cached)."""
    burn = "import time\nend = time.time() + 20\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        c = ceil.measure("cpu", *ceil.device_identity("cpu"), threads=1)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert not c.trusted and "cores busy" in c.busy


def _judge(candidate, **options):
    return evaluate(load_task(options.pop("task", AXPBY)), load_candidate(candidate), None,
                    JudgeOptions(device="cpu", policy=QUICK, **options))


def test_a_poisoned_cache_is_re_measured_and_replaced_and_the_honest_seed_passes(cache):
    """The cache holds this machine's key with a copy rate far too low (the 2026-12-01 report: 20x under,
    from a busy machine and the wrong thread count), low enough here that every floor is above 1 ms. The
    honest rmsnorm CPU seed still passes: its reference runs under the poisoned floors, which proves them
    wrong; the judge re-measures and the entry is replaced (or dropped when the machine is too busy to
    trust a new one)."""
    task = load_task("rmsnorm")
    true = ceil.get_ceilings("cpu", remeasure=True)
    least = min(task.shape_cost(s, torch.float32).bytes for s in task.shape_set("cpu").public)
    poisoned = fake(copy_tbps=min(true.copy_tbps / 20, least / 1e-3 / 1e12), matmul_tflops=true.matmul_tflops / 20,
                    age_s=60)
    plant(cache, poisoned)
    ceil._MEMO.clear()
    v = _judge(RMSNORM_SEED, task="rmsnorm")
    assert v.verdict == "pass" and v.reasons == [], v.reasons
    assert any("re-measured" in n for n in v.notes), v.notes
    assert v.ceilings["copy_tbps"] > poisoned.copy_tbps * 10
    entry = json.loads(cache.read_text()).get(poisoned.key)
    assert entry is None or entry["copy_tbps"] != poisoned.copy_tbps
    assert all(s.floor_us < s.median_us for s in v.shapes if s.median_us)


def test_the_zero_time_cheat_is_still_refused_after_the_re_check(cache):
    v = _judge(ZERO_TIME)
    assert v.verdict == "fail"
    assert {"beyond_roofline", "timer_tampered", "harness_tampered", "clock_mismatch"} & {r.code for r in v.reasons}


# The roofline pass alone, on rows as timing leaves them (axpby: 12 bytes per element; N = 4096 is 49 kB).
def _rows(cand_us: float, ref_us: float) -> list[ShapeResult]:
    return [ShapeResult(shape={"N": 4096}, dtype="float32", median_us=cand_us, ref_median_us=ref_us)]


def _roofline(rows, ceilings) -> tuple[Verdict, list[str]]:
    evaluation = Evaluation(load_task(AXPBY), load_candidate(HONEST_AXPBY), {}, JudgeOptions(device="cpu"))
    verdict = Verdict("pass")
    try:
        evaluation._roofline(rows, verdict, ceilings)
    except Abort as abort:
        return verdict, [r.code for r in abort.reasons]
    return verdict, []


def test_a_floor_beaten_against_stale_ceilings_is_re_measured_first(cache, monkeypatch):
    """Cached 0.05 TB/s gives a 1 us floor; a 0.5 us candidate triggers a re-measurement, and against the
    fresh 1 TB/s (a 0.05 us floor) it passes."""
    calls = []
    fresh = fake(copy_tbps=1.0, age_s=-1)
    monkeypatch.setattr(ceil, "remeasure_ceilings", lambda *a, **k: calls.append(k) or fresh)
    verdict, codes = _roofline(_rows(0.5, 5.0), fake(copy_tbps=0.05, age_s=60))
    assert codes == [] and len(calls) == 1 and verdict.ceilings["copy_tbps"] == 1.0
    assert any("re-measured" in n for n in verdict.notes)


def test_a_floor_beaten_against_fresh_trusted_ceilings_is_refused(cache, monkeypatch):
    fresh = fake(copy_tbps=0.05, age_s=-1)  # the re-measurement confirms the 1 us floor
    monkeypatch.setattr(ceil, "remeasure_ceilings", lambda *a, **k: fresh)
    _, codes = _roofline(_rows(0.5, 5.0), fake(copy_tbps=0.05, age_s=60))
    assert codes == ["beyond_roofline"]


def test_untrusted_fresh_ceilings_refuse_only_far_under_the_floor(cache, monkeypatch):
    busy = fake(copy_tbps=0.05, trusted=False, age_s=-1)
    monkeypatch.setattr(ceil, "remeasure_ceilings", lambda *a, **k: busy)
    stale = fake(copy_tbps=0.01, trusted=False, age_s=60)
    assert _roofline(_rows(0.5, 5.0), stale)[1] == []  # 2x under a busy machine's floor: not proof
    assert _roofline(_rows(0.001, 5.0), stale)[1] == ["beyond_roofline"]  # 1000x under: impossible


def test_ceilings_measured_in_this_evaluation_are_not_measured_again(cache, monkeypatch):
    monkeypatch.setattr(ceil, "remeasure_ceilings", lambda *a, **k: pytest.fail("measured twice"))
    _, codes = _roofline(_rows(0.5, 5.0), fake(copy_tbps=0.05, age_s=-5))
    assert codes == ["beyond_roofline"]


def test_the_reference_under_the_floor_refutes_the_cache_and_voids_that_floor(cache, monkeypatch):
    """The reference beating the floor proves the ceilings wrong: the cached entry goes, and when even the
    fresh numbers leave the reference under the floor, that shape's floor is not applied (the reference is
    never refused, nor a candidate on a floor proven wrong)."""
    poisoned = fake(copy_tbps=1e-6, age_s=60)
    plant(cache, poisoned)
    monkeypatch.setattr(ceil, "remeasure_ceilings", lambda *a, **k: fake(copy_tbps=1e-5, trusted=False, age_s=-1))
    verdict, codes = _roofline(_rows(0.5, 5.0), poisoned)
    assert codes == []
    assert json.loads(cache.read_text()) == {}  # refuted
    assert any("the floor is not applied" in n for n in verdict.notes), verdict.notes
