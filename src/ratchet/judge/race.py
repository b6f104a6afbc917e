"""Racing: stop timing a candidate that is already clearly slower than the run's best. TRUSTED.

The run hands the judge a ``RaceBar``: plain numbers taken from the best attempt of the same run and
device (its times at the task's heaviest shapes, each normalized by the median of the reference timed
beside it, as the keep rule normalizes them). While those shapes are timed, the judge asks
``race_decision`` at a few fixed looks whether the candidate's times are beyond the bar; if so the
candidate is no longer timed (verdict pass, never kept). The rule is the keep rule's per-shape loss test
made stricter, so that a candidate the keep rule might still keep is never raced:

- the candidate's median normalized time exceeds the best's by more than ``margin`` times the best's
  noise floor (the relative half-IQR of its times, at least ``min_noise``: the keep rule's floor),
  widened by twice the relative standard error of the reference median the candidate's times are
  normalized by (few reference calls have been timed at an early look);
- a one-sided Mann-Whitney U test of the candidate's normalized times against the best's gives
  p < ``alpha`` (the keep rule uses the same test at 0.01).
At most ``len(looks) + 1`` looks per shape (the listed batch counts and the end of the shape's timing),
so the chance that an honest candidate no slower than the bar is raced is at most that many times
``alpha`` per raced shape (Bonferroni), and far less in practice since the median must also be beyond
the margin. A candidate near the best, or faster, always runs the whole protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratchet.judge.timing import summarize


@dataclass(frozen=True)
class RaceShape:
    """The best's normalized times at one shape, dtype and timing mode."""

    shape: tuple[tuple[str, int], ...]  # sorted (name, size) pairs
    dtype: str
    mode: str  # "eager" or "graph": only times of the same mode are compared
    best_times: tuple[float, ...]  # the best's times over its own session's reference median
    best_seq: int | None = None  # for the verdict's text only

    @property
    def key(self) -> tuple:
        return self.shape, self.dtype, self.mode


@dataclass(frozen=True)
class RaceBar:
    shapes: tuple[RaceShape, ...]
    alpha: float = 0.001
    margin: float = 2.0  # in noise floors of the best
    min_noise: float = 0.01  # the keep rule's floor
    looks: tuple[int, ...] = (3, 6, 12)  # batch counts (one batch of each side) at which the rule is asked

    def entry(self, shape: dict, dtype: str, mode: str) -> RaceShape | None:
        key = (tuple(sorted(shape.items())), dtype, mode)
        return next((s for s in self.shapes if s.key == key), None)

    def order(self) -> list[tuple]:
        """(shape items, dtype) of the bar's shapes, in the bar's order: these are timed first."""
        return [(s.shape, s.dtype) for s in self.shapes]


@dataclass(frozen=True)
class RaceDecision:
    slower: float  # candidate median / best median, normalized (> 1: slower)
    threshold: float
    p_value: float
    batches: int


def race_decision(entry: RaceShape, bar: RaceBar, cand_us: list[float], ref_us: list[float],
                  batches: int) -> RaceDecision | None:
    """A decision to stop timing when the candidate is beyond the bar at this shape, else None."""
    best = np.asarray(entry.best_times, dtype=float)
    if len(cand_us) < 3 or len(ref_us) < 3 or len(best) < 3:
        return None
    ref_median, _, ref_rse = summarize(list(ref_us))
    if not ref_median > 0 or not np.isfinite(ref_rse):
        return None
    cand = np.asarray(cand_us, dtype=float) / ref_median
    q1, med, q3 = np.percentile(best, [25, 50, 75])
    noise = max(bar.min_noise, 0.5 * (q3 - q1) / med)
    threshold = (1 + bar.margin * noise) * (1 + 2 * ref_rse)
    slower = float(np.median(cand) / med)
    if slower <= threshold:
        return None
    # Imported here, not at the top: every judge worker imports this module (through ratchet.judge), and
    # scipy.stats took 0.7 s of each worker's start on the CPU (2026-12-02).
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(cand, best, alternative="greater").pvalue)
    if p >= bar.alpha:
        return None
    return RaceDecision(slower=slower, threshold=threshold, p_value=p, batches=batches)
