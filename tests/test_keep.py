"""The keep rule on recorded timings: noise is not a win, a real gain is, a gain that slows one shape
is not, and ties go to the simpler code."""

import numpy as np

from ratchet.run.keep import KeepPolicy, decide


def verdict(shape_times: dict, ref=100.0, verdict="pass", seed=0, noise=0.02):
    """A verdict JSON with ``n`` noisy times per shape around the given medians (µs)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, median in shape_times.items():
        rows.append({
            "shape": {"N": name}, "dtype": "float32", "weight": 1.0, "held_out": False,
            "times_us": list(median * (1 + noise * rng.standard_normal(60))),
            "ref_times_us": list(ref * (1 + noise * rng.standard_normal(60))),
        })
    return {"verdict": verdict, "shapes": rows}


BEST = verdict({1: 50.0, 2: 50.0, 3: 50.0}, seed=1)


def test_first_pass_is_kept_and_failures_never_are():
    assert decide(BEST, None).keep
    assert not decide(verdict({1: 10.0}, verdict="fail"), None).keep


def test_noise_level_gain_is_not_kept():
    same = verdict({1: 49.8, 2: 50.1, 3: 49.9}, seed=2)
    d = decide(same, BEST)
    assert not d.keep and "within noise" in d.reason
    assert abs(d.gain - 1) < 0.02


def test_real_gain_is_kept():
    faster = verdict({1: 40.0, 2: 41.0, 3: 39.0}, seed=3)
    d = decide(faster, BEST)
    assert d.keep, d.reason
    assert 1.2 < d.gain < 1.3 and d.p_value < 0.01


def test_gain_that_slows_one_shape_is_not_kept():
    mixed = verdict({1: 30.0, 2: 30.0, 3: 60.0}, seed=4)
    d = decide(mixed, BEST)
    assert d.gain > 1.1  # faster overall...
    assert not d.keep and "slower than the best" in d.reason and "N': 3" in d.reason


def test_reference_drift_between_sessions_cancels():
    # The machine got 20% slower for everything: same kernel, same speedup: not a win, not a loss.
    drifted = verdict({1: 60.0, 2: 60.0, 3: 60.0}, ref=120.0, seed=5)
    assert not decide(drifted, BEST).keep


def test_ties_go_to_simpler_code():
    tie = verdict({1: 50.0, 2: 50.1, 3: 49.9}, seed=6)
    long_src = "def kernel(x):\n" + "    y = x\n" * 30 + "    return y\n"
    short_src = "def kernel(x):\n    return x\n"
    assert decide(tie, BEST, short_src, long_src).keep
    assert not decide(tie, BEST, long_src, short_src).keep


def test_noisy_best_raises_the_bar():
    noisy_best = verdict({1: 50.0, 2: 50.0, 3: 50.0}, seed=7, noise=0.3)
    slightly = verdict({1: 47.0, 2: 47.0, 3: 47.0}, seed=8)
    d = decide(slightly, noisy_best, policy=KeepPolicy())
    assert not d.keep and d.noise > 0.1
