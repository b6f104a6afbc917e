"""The keep rule (DESIGN.md, "Keep rule"): a candidate replaces the best only on a real win.

Both verdicts carry per-shape times of the kernel and of the reference measured in the same session.
Times are normalized by their own session's reference median, so two evaluations made minutes apart
compare as speedups, never as raw numbers from different moments. A candidate is kept when
- it passed;
- its weighted geometric-mean gain over the best exceeds the best's noise floor, and a bootstrap of
  that gain puts it above 1 with probability at least 1 - alpha;
- no shape is slower than the best beyond that shape's noise floor (with a significant difference);
- or, within noise either way, its code is simpler (fewer non-blank, non-comment lines).
A raced verdict (timing stopped at a shape where the candidate was clearly slower than the best, see
``race_bar`` and judge/race.py) is never kept.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

from ratchet.judge.race import RaceBar, RaceShape


@dataclass(frozen=True)
class KeepPolicy:
    alpha: float = 0.01  # one-sided significance of a gain, and of a per-shape loss
    min_noise: float = 0.01  # run-to-run agreement on a quiet GPU is ~1%: never trust less
    bootstrap: int = 400


@dataclass(frozen=True)
class KeepDecision:
    keep: bool
    reason: str
    gain: float | None = None  # weighted geometric-mean speed ratio best/candidate (>1: faster)
    noise: float | None = None  # the best's relative noise floor used
    p_value: float | None = None


def shape_key(row: dict) -> tuple:
    return tuple(sorted(row["shape"].items())), row["dtype"]


def normalized_times(row: dict) -> np.ndarray:
    """Kernel times over the median of the reference timed beside them."""
    ref = float(np.median(row["ref_times_us"]))
    return np.asarray(row["times_us"], dtype=float) / ref


def noise_floor(times: np.ndarray, policy: KeepPolicy) -> float:
    """Relative half-IQR of the best's normalized times: the spread one more measurement would show."""
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return max(policy.min_noise, 0.5 * (q3 - q1) / med)


def code_size(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def decide(candidate: dict, best: dict | None, candidate_source: str = "", best_source: str = "",
           policy: KeepPolicy = KeepPolicy(), seed: int = 0) -> KeepDecision:
    """Should ``candidate`` (a verdict JSON with times) replace ``best``?"""
    if candidate.get("verdict") != "pass":
        return KeepDecision(False, f"verdict {candidate.get('verdict')}")
    if candidate.get("raced"):  # timing stopped where it was clearly slower than the best: never a win
        return KeepDecision(False, raced_reason(candidate["race"]))
    if best is None:
        return KeepDecision(True, "first passing candidate")
    best_rows = {shape_key(r): r for r in best["shapes"] if r.get("times_us")}
    pairs = [(r, best_rows[shape_key(r)]) for r in candidate["shapes"] if r.get("times_us") and shape_key(r) in best_rows]
    if not pairs:
        return KeepDecision(False, "no timed shapes in common with the best")
    weights = np.array([c.get("weight", 1.0) for c, _ in pairs])
    xs = [normalized_times(c) for c, _ in pairs]
    ys = [normalized_times(b) for _, b in pairs]
    gains = np.array([np.median(y) / np.median(x) for x, y in zip(xs, ys)])
    noises = np.array([noise_floor(y, policy) for y in ys])
    gain = _weighted_geomean(gains, weights)
    noise = _weighted_geomean(1 + noises, weights) - 1
    for (c, _), x, y, g, nf in zip(pairs, xs, ys, gains, noises):
        if g < 1 - nf and _significant(x, y, policy.alpha, "greater"):
            return KeepDecision(False, f"shape {c['shape']} {c['dtype']} is {100 * (1 - g):.1f}% slower than the best "
                                       f"(noise {100 * nf:.1f}%)", gain, noise)
    p = _bootstrap_p(xs, ys, weights, policy.bootstrap, seed)
    if gain > 1 + noise and p < policy.alpha:
        return KeepDecision(True, f"{100 * (gain - 1):.1f}% faster (noise {100 * noise:.1f}%, p={p:.3g})", gain, noise, p)
    if abs(gain - 1) <= noise and candidate_source and code_size(candidate_source) < code_size(best_source):
        return KeepDecision(True, "a tie within noise, and simpler code", gain, noise, p)
    return KeepDecision(False, f"gain {100 * (gain - 1):+.1f}% is within noise {100 * noise:.1f}% (p={p:.3g})",
                        gain, noise, p)


def _weighted_geomean(values: np.ndarray, weights: np.ndarray) -> float:
    return float(math.exp(np.sum(weights * np.log(values)) / np.sum(weights)))


def _significant(x: np.ndarray, y: np.ndarray, alpha: float, alternative: str) -> bool:
    if len(x) < 3 or len(y) < 3:
        return False
    return mannwhitneyu(x, y, alternative=alternative).pvalue < alpha


def _bootstrap_p(xs, ys, weights, rounds: int, seed: int) -> float:
    """Share of resamples in which the candidate is not faster overall: a one-sided p-value."""
    rng = random.Random(seed)
    not_faster = 0
    for _ in range(rounds):
        gains = []
        for x, y in zip(xs, ys):
            bx = np.median([x[rng.randrange(len(x))] for _ in range(len(x))])
            by = np.median([y[rng.randrange(len(y))] for _ in range(len(y))])
            gains.append(by / bx)
        if _weighted_geomean(np.array(gains), weights) <= 1.0:
            not_faster += 1
    return (not_faster + 1) / (rounds + 1)


# The best's shapes a race bar holds: the heaviest of each dtype by the task's cost model (the judge
# times them first). A candidate slower there is never kept. Lighter shapes are not raced, so a candidate
# that wins only at the heavy shapes still runs to the end and can enter a per-shape composite
# (run/composite.py).
RACE_SHAPES_PER_DTYPE = 1


def race_bar(best: dict | None, task, policy: KeepPolicy = KeepPolicy()) -> RaceBar | None:
    """The judge's race bar from the run's best attempt (a ledger row or verdict JSON with times), or
    None when there is no best or it has no timed shapes."""
    from ratchet.judge.evaluation import shape_size

    if best is None or best.get("verdict") != "pass" or best.get("raced") or (best.get("extra") or {}).get("raced"):
        return None
    rows = [r for r in best.get("shapes") or [] if r.get("times_us") and r.get("ref_times_us") and not r.get("held_out")]
    chosen = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        same = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: -shape_size(task, r["shape"], dtype))
        chosen += same[:RACE_SHAPES_PER_DTYPE]
    if not chosen:
        return None
    return RaceBar(shapes=tuple(RaceShape(shape=tuple(sorted((k, int(v)) for k, v in r["shape"].items())),
                                          dtype=r["dtype"], mode=r.get("mode") or "eager",
                                          best_times=tuple(float(t) for t in normalized_times(r)),
                                          best_seq=best.get("seq"))
                                for r in chosen), min_noise=policy.min_noise)


def raced_reason(race: dict) -> str:
    shape = ", ".join(f"{k}={v}" for k, v in race["shape"].items())
    best = f" (attempt {race['best_seq']})" if race.get("best_seq") else ""
    return (f"raced: {race['slower']:.2f}x slower than the best{best} at {shape} {race['dtype']} after "
            f"{race['batches']} batches")
