"""Racing, offline on recorded-looking times: the stopping rule (judge.race) stops a clear loser early,
never a winner or a candidate within noise of the best; the run's bar (keep.race_bar) holds the best's
heaviest shape per dtype; a raced verdict is never kept."""

import random

import pytest

from ratchet.judge.race import RaceBar, RaceShape, race_decision
from ratchet.run.keep import decide, race_bar
from ratchet.task import load_task
from pathlib import Path

DATA = Path(__file__).parent / "data"


def noisy(median, n, spread, seed):
    rng = random.Random(seed)
    return [median * (1 + spread * rng.gauss(0, 1)) for _ in range(n)]


def bar_for(best_norm_median=0.5, spread=0.01, n=64, seed=0):
    entry = RaceShape(shape=(("N", 4096),), dtype="float32", mode="eager",
                      best_times=tuple(noisy(best_norm_median, n, spread, seed)), best_seq=1)
    return entry, RaceBar(shapes=(entry,))


def looks(entry, bar, cand_median, ref_median=100.0, spread=0.01, batches=12, batch=8, seed=1):
    """The first batch count at which the rule stops a candidate, or None if it never does."""
    cand, ref = [], []
    rng = random.Random(seed)
    for b in range(1, batches + 1):
        cand += [cand_median * (1 + spread * rng.gauss(0, 1)) for _ in range(batch)]
        ref += [ref_median * (1 + spread * rng.gauss(0, 1)) for _ in range(batch)]
        if b in bar.looks and race_decision(entry, bar, cand, ref, b):
            return b
    return None


def test_a_clear_loser_stops_at_the_first_look():
    entry, bar = bar_for(best_norm_median=0.5)
    # The best ran at half the reference's time; this one at 1.9x the best's.
    stop = looks(entry, bar, cand_median=95.0)
    assert stop == bar.looks[0] == 3
    decision = race_decision(entry, bar, noisy(95.0, 24, 0.01, 2), noisy(100.0, 24, 0.01, 3), 3)
    assert decision.slower == pytest.approx(1.9, rel=0.02) and decision.p_value < bar.alpha
    assert decision.threshold < 1.1


@pytest.mark.parametrize("cand_median", [50.0, 40.0, 50.5, 49.5])  # the best's speed, faster, within noise
def test_a_winner_or_a_noise_level_candidate_is_never_raced(cand_median):
    entry, bar = bar_for(best_norm_median=0.5)
    for seed in range(20):
        assert looks(entry, bar, cand_median=cand_median, seed=seed) is None


def test_slower_but_within_the_margin_runs_to_the_end():
    # 1.5% slower than a best whose noise floor is 1%: the keep rule would not keep it either, but it is
    # within the race's margin (two noise floors), so racing leaves it to the full protocol.
    entry, bar = bar_for(best_norm_median=0.5)
    assert all(looks(entry, bar, cand_median=50.75, seed=s) is None for s in range(20))


def test_a_noisy_best_widens_the_margin():
    entry, bar = bar_for(best_norm_median=0.5, spread=0.2)  # half-IQR ~13%: margin ~27%
    assert looks(entry, bar, cand_median=60.0, spread=0.01) is None  # 20% slower: not beyond it
    assert looks(entry, bar, cand_median=100.0, spread=0.01) is not None  # 2x: raced


def test_few_calls_are_never_enough():
    entry, bar = bar_for()
    assert race_decision(entry, bar, [200.0, 210.0], [100.0, 101.0], 1) is None


def best_row(shape, ref_us, times_us, dtype="float32", mode="eager"):
    return {"shape": shape, "dtype": dtype, "held_out": False, "mode": mode, "weight": 1.0,
            "times_us": times_us, "ref_times_us": [ref_us] * len(times_us)}


def test_the_bar_holds_the_heaviest_shape_by_the_task_cost_model():
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    best = {"verdict": "pass", "seq": 4, "shapes": [
        best_row({"N": 1000}, 10.0, noisy(5.0, 16, 0.01, 1)),
        best_row({"N": 4096}, 9.0, noisy(4.0, 16, 0.01, 2)),  # its reference was timed faster: cost decides
        {"shape": {"N": 3001}, "dtype": "float32", "held_out": True, "times_us": [], "ref_times_us": []}]}
    bar = race_bar(best, task)
    (entry,) = bar.shapes
    assert entry.shape == (("N", 4096),) and entry.best_seq == 4
    assert entry.best_times == pytest.approx([t / 9.0 for t in best["shapes"][1]["times_us"]])
    assert race_bar(None, task) is None and race_bar({**best, "verdict": "fail"}, task) is None


def test_a_raced_verdict_is_never_kept():
    race = {"shape": {"N": 4096}, "dtype": "float32", "mode": "eager", "batches": 3, "slower": 1.9,
            "threshold": 1.03, "p_value": 1e-6, "best_seq": 2}
    verdict = {"verdict": "pass", "raced": True, "race": race, "shapes": []}
    decision = decide(verdict, {"verdict": "pass", "shapes": []})
    assert not decision.keep
    assert decision.reason == "raced: 1.90x slower than the best (attempt 2) at N=4096 float32 after 3 batches"
