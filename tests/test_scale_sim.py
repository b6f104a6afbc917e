"""benchmarks.scale_sim: the simulated run scales with GPUs while the driver keeps up, and never beyond
what one driver can commit; the GPU's lock is honoured (timings never overlap on one GPU)."""

import pytest

from benchmarks.scale_sim import DriverCost, Phases, simulate

PHASES = Phases(start_s=2.0, correctness_s=6.0, timing_s=2.0, source="test")


def driver(propose_s: float, commit_s: float) -> DriverCost:
    return DriverCost([{"attempts_from": 0, "attempts_to": 100, "propose_s": propose_s, "dispatch_s": 0.0,
                        "commit_s": commit_s}])


def test_throughput_is_linear_in_gpus_while_the_driver_keeps_up():
    cheap = driver(0.001, 0.002)
    one, two, eight = (simulate(g, PHASES, cheap, attempts=60 * g, spread=0.2) for g in (1, 2, 8))
    for many in (two, eight):
        assert many["candidates_per_hour"] / (one["candidates_per_hour"] * many["gpus"]) == pytest.approx(1.0, abs=0.1)
    assert eight["driver_busy_share"] < 0.05


def test_one_gpu_is_bound_by_its_pipeline_and_its_exclusive_timing():
    result = simulate(1, PHASES, driver(0.0, 0.0), attempts=300, spread=0.0)
    # Three evaluations at once over 10 s each, but timing is exclusive: at most one per timing_s.
    assert result["candidates_per_hour"] <= 3600 / PHASES.timing_s * 1.001
    assert result["candidates_per_hour"] <= 3 * 3600 / (2.0 + 6.0 + 2.0) * 1.1
    assert result["gpu_timing_share"] <= 1.0


def test_the_driver_caps_throughput_once_it_saturates():
    slow = driver(0.05, 0.05)  # 0.1 s of driver work a candidate: at most 36000 an hour
    many = simulate(512, PHASES, slow, attempts=3000, spread=0.2)
    assert many["candidates_per_hour"] <= 36000 * 1.001
    assert many["driver_busy_share"] > 0.95
    assert many["candidates_per_hour"] < 0.5 * 512 * simulate(1, PHASES, slow, attempts=100)["candidates_per_hour"]


def test_driver_costs_interpolate_and_extend_along_the_last_windows():
    costs = DriverCost([{"attempts_from": 0, "attempts_to": 100, "propose_s": 0.01, "dispatch_s": 0.0, "commit_s": 0.1},
                        {"attempts_from": 100, "attempts_to": 200, "propose_s": 0.03, "dispatch_s": 0.0, "commit_s": 0.1}])
    assert costs.propose_s(0) == pytest.approx(0.01)
    assert costs.propose_s(100) == pytest.approx(0.02)
    assert costs.propose_s(250) == pytest.approx(0.05)  # extended: +0.02 per 100 attempts past the last middle
    assert costs.commit_s(1000) == pytest.approx(0.1)
