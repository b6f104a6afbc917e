"""benchmarks/probes/loop_throughput.py's summaries of a run's attempts (the GPU measurement itself is a benchmark)."""

import os

from benchmarks.probes.loop_throughput import phase_means, timed_call_means


def _attempt(wall, phases, calls, means):
    return {"judge_wall_s": wall, "extra": {"phases_s": phases, "timed_calls": {"calls": calls, "mean_us": means}}}


def test_means_per_attempt_and_per_timed_call():
    attempts = [_attempt(10.0, {"start": 2.0, "timing": 4.0}, 100, {"sync": 300.0, "round_trip": 100.0}),
                _attempt(20.0, {"start": 4.0, "timing": 8.0}, 300, {"sync": 500.0, "round_trip": 200.0}),
                {"judge_wall_s": None, "extra": {}}]  # an attempt that never reached timing
    assert phase_means(attempts) == "judge 15.0 s, start 3.0 s, timing 6.0 s"
    # Weighted by calls: sync (100 * 300 + 300 * 500) / 400 = 450, round trip 175.
    assert timed_call_means(attempts) == "400 timed calls, us per call: sync 450, round_trip 175"
    assert timed_call_means([{"extra": {}}]) == "-"


def test_timed_kernel_seconds_sum_calls_times_mean_kernel_time():
    from benchmarks.probes.loop_throughput import timed_kernel_seconds

    attempts = [_attempt(10.0, {}, 100, {"kernel": 5.0}), _attempt(10.0, {}, 300, {"kernel": 10.0}), {"extra": {}}]
    assert abs(timed_kernel_seconds(attempts) - (100 * 5.0 + 300 * 10.0) / 1e6) < 1e-12


def test_judge_host_share_of_one_core_and_mean_gpu_wait():
    from benchmarks.probes.loop_throughput import judge_host

    attempts = [{"extra": {"judge_host_s": {"cpu": 6.0, "gpu_wait": 1.0, "first_call": 2.0, "calls": 1.0,
                                            "first_launch": 0.5, "first_profiled": 0.0,
                                            "checks": 0.5}}},
                {"extra": {"judge_host_s": {"cpu": 3.0, "gpu_wait": 3.0, "first_call": 4.0, "calls": 3.0,
                                            "first_launch": 0.0, "first_profiled": 3.0,
                                            "checks": 1.5}}},
                {"extra": {}}]  # recorded before the judge reported it
    assert judge_host(attempts, 30.0) == (
        "judge threads' CPU 9.0 s = 30% of one core over the run; per attempt waiting for the GPU 2.0 s, "
        "correctness: first call 3.0 s (its launch, compile included, 0.2 s by the worker's clock, or 1.5 s where "
        "it ran under the profiler), other calls 2.0 s, checks 1.0 s")
    assert judge_host([{"extra": {}}], 30.0) == "-"


def test_fresh_build_caches_point_the_workers_elsewhere_and_restore_after(tmp_path, monkeypatch):
    from benchmarks.probes.loop_throughput import fresh_build_caches

    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/triton")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    with fresh_build_caches(tmp_path):
        assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "triton_cache_dir")
        assert os.environ["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "torch_extensions_dir")
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/triton" and "TORCH_EXTENSIONS_DIR" not in os.environ
