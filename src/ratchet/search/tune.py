"""The tuner: Optuna over a candidate's SPACE. The model or the person writes the idea; search picks
the block sizes, warps and stages, which it does better than anyone.

- The seed's defaults (the first value of every SPACE list) are tried first; in SPACEs of fewer than
  64 configs their neighbours (one knob one step away) come next, then TPE.
- No config is measured twice: a repeat suggestion is answered from what was already measured.
- Configs that fail or error are recorded and told to the study as failed trials.
- Constraints between parameters come from the candidate's ``CONSTRAINTS`` (expressions over SPACE
  names, e.g. ``"BLOCK_N % BLOCK_K == 0"``); configs breaking one are never proposed.
Samplers: TPE (default), random, or grid (exhaustive, what ``triton.autotune`` does).
``TuneSettings`` holds TPE's knobs; its defaults are what replays over measured landscapes chose
(benchmarks/probes/search_efficiency.py --variants, docs/NOTES.md).
"""

from __future__ import annotations

import logging
import math
import random
import warnings
from dataclasses import dataclass

import optuna

from ratchet.candidate import Candidate
from ratchet.run.ledger import config_key
from ratchet.search.base import Outcome, Proposal

optuna.logging.set_verbosity(logging.WARNING)
# multivariate=True is still marked experimental by Optuna; the warning says nothing to a user.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

SAMPLERS = ("tpe", "random", "grid")


@dataclass(frozen=True)
class TuneSettings:
    """How TPE sees a SPACE. ``ordinal``: a list of numbers only (block sizes, warps, stages) is an
    integer index into its sorted values, so TPE can learn that neighbours perform alike; other lists
    stay categorical. ``zero_last``: in a list of numbers 0 sorts after the largest value (for ordinal
    knobs and for the default's neighbours), because the seeds use 0 for "auto" / "the whole row"
    (BLOCK_H=0, CHUNK=0). ``multivariate``: TPE models the knobs jointly rather than one by one.
    Startup: that many random trials (a share of the valid configs, at most ``startup_max``) before TPE
    models anything."""

    ordinal: bool = False
    zero_last: bool = True
    multivariate: bool = False
    startup_share: float = 0.25
    startup_max: int = 8
    # Suggestions asked per proposal before giving up on the sampler (None: 20 per valid config, as
    # before 2026-11-30). Each repeat is told to the study as a trial; near the end of a space TPE
    # repeats itself thousands of times and its cost grows with the trials it holds: tests/test_tune.py's
    # 51-config exhaustion took over 5 minutes with None, 0.7 s with 8. Replays: same or fewer trials.
    asks: int | None = 8
    # When the sampler only repeats itself: "first" unmeasured config in SPACE order, or the one
    # "nearest" to its last suggestion (fewest knobs changed, ordinal knobs by index distance).
    fallback: str = "nearest"
    # In a SPACE of fewer valid configs than this, the default's neighbours (one knob moved one step in
    # its sorted values, or to any other value of a non-numeric knob) come right after it, in an order
    # drawn from the search seed, before the sampler's own trials. 0: never. Why (H200 landscapes of
    # every built-in Triton SPACE, 2026-12-01, docs/NOTES.md): the seeds' defaults are their authors'
    # guesses, and in 11 of 14 SPACEs the best config or one within 2% of it is one knob away; on those
    # 14 the median trials to within 2% fell from a mean share of 23% to 19%. On 136-config synthetic
    # spaces the same start cost 25% against 14% (TPE, fed mostly the default's neighbourhood, stayed
    # there), so large SPACEs keep TPE's random startup. The largest real SPACE has 42 configs: the
    # threshold between is not measured on a real one.
    neighbours_below: int = 64


@dataclass
class _Study:
    candidate: Candidate
    study: optuna.Study | None  # None: exhaustive grid
    valid: list[dict]  # every config that meets the constraints, in SPACE order
    orders: dict  # SPACE key -> its values in the order the study indexes (ordinal keys only)
    tried: dict  # config key -> objective value (None for failed)
    pending: dict  # config key -> optuna trial waiting for its outcome
    keys: tuple = ()  # config_key of each valid config, in the same order, made once
    valid_keys: frozenset = frozenset()

    def __post_init__(self):
        # Once per study, not per proposal: a space of 8^6 configs cost 3.6 s of JSON a proposal
        # (benchmarks/probes/driver_cost.py, 2026-12-02), which would make the driver the bottleneck.
        self.keys = tuple(config_key(c) for c in self.valid)
        self.valid_keys = frozenset(self.keys)


class TuneProposer:
    """Round-robin over the seeds; for each, an Optuna study over its SPACE."""

    name = "tune"

    def __init__(self, candidates: list[Candidate], sampler: str = "tpe", seed: int = 0,
                 settings: TuneSettings | None = None):
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler '{sampler}' (choose from {', '.join(SAMPLERS)})")
        self.settings = settings or TuneSettings()
        self.studies = [self._new_study(c, sampler, seed + i) for i, c in enumerate(candidates)]
        self._turn = 0

    def _new_study(self, candidate: Candidate, sampler: str, seed: int) -> _Study:
        valid = candidate.valid_configs()
        if sampler == "grid":
            # Exhaustive in SPACE order, like triton.autotune. Optuna's GridSampler stops the study
            # itself when the grid is done, which ask-and-tell use does not allow, so no study drives it.
            return _Study(candidate, None, valid, {}, {}, {})
        cfg = self.settings
        orders = {k: _order(v, cfg.zero_last) for k, v in candidate.space.items() if cfg.ordinal and _numeric(v)}
        queued = []  # asked for before the sampler decides anything: the default, maybe its neighbours
        if candidate.space and valid:
            first = valid[0] if candidate.default_config() not in valid else candidate.default_config()
            queued.append(first)
            if sampler == "tpe" and len(valid) < cfg.neighbours_below:
                queued += _neighbours(first, candidate.space, valid, cfg.zero_last, random.Random(seed))
        if sampler == "random":
            chosen = optuna.samplers.RandomSampler(seed=seed)
        else:
            startup = min(cfg.startup_max, max(1, int(len(valid) * cfg.startup_share)))
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=cfg.multivariate)
        study = optuna.create_study(direction="maximize", sampler=chosen)
        s = _Study(candidate, study, valid, orders, {}, {})
        for config in queued:
            study.enqueue_trial(self._params(s, config))
        return s

    @staticmethod
    def _params(s: _Study, config: dict) -> dict:
        """A config as the study's parameters: ordinal keys by their index in the sorted values."""
        return {k: s.orders[k].index(v) if k in s.orders else v for k, v in config.items()}

    @staticmethod
    def _distributions(s: _Study) -> dict:
        return {k: optuna.distributions.IntDistribution(0, len(s.orders[k]) - 1) if k in s.orders
                else optuna.distributions.CategoricalDistribution(list(v)) for k, v in s.candidate.space.items()}

    @staticmethod
    def _suggest(s: _Study, trial) -> dict:
        return {k: s.orders[k][trial.suggest_int(k, 0, len(s.orders[k]) - 1)] if k in s.orders
                else trial.suggest_categorical(k, list(v)) for k, v in s.candidate.space.items()}

    def exhausted(self) -> bool:
        return all(len(s.tried) + len(s.pending) >= max(1, len(s.valid)) for s in self.studies)

    def propose(self) -> Proposal | None:
        for _ in range(len(self.studies)):
            s = self.studies[self._turn % len(self.studies)]
            self._turn += 1
            proposal = self._propose_from(s)
            if proposal is not None:
                return proposal
        return None

    def _propose_from(self, s: _Study) -> Proposal | None:
        if not s.candidate.space:
            if s.tried or s.pending:
                return None
            s.pending[config_key({})] = None
            return Proposal(s.candidate, {}, proposer=self.name)
        valid_keys = s.valid_keys
        if s.study is None:
            return self._first_unmeasured(s)
        # Bounded: each loop either proposes, or answers a repeat/invalid suggestion without measuring.
        wanted = None
        for _ in range(self.settings.asks or 20 * max(1, len(s.valid))):
            if len(s.tried) + len(s.pending) >= len(s.valid):
                return None
            trial = s.study.ask()
            config = wanted = self._suggest(s, trial)
            key = config_key(config)
            if key not in valid_keys:
                s.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            elif key in s.tried:
                value = s.tried[key]
                s.study.tell(trial, value) if value is not None else s.study.tell(
                    trial, state=optuna.trial.TrialState.FAIL)
            elif key in s.pending:
                s.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                s.pending[key] = trial
                return Proposal(s.candidate, config, proposer=self.name)
        # The sampler keeps repeating itself: take a config nobody measured yet.
        if self.settings.fallback == "nearest" and wanted is not None:
            return self._nearest_unmeasured(s, wanted)
        return self._first_unmeasured(s)

    def _nearest_unmeasured(self, s: _Study, wanted: dict) -> Proposal | None:
        def distance(config):
            return sum(abs(s.orders[k].index(v) - s.orders[k].index(wanted[k])) / (len(s.orders[k]) - 1)
                       if k in s.orders else float(v != wanted[k]) for k, v in config.items())

        free = [c for c, key in zip(s.valid, s.keys) if key not in s.tried and key not in s.pending]
        if not free:
            return None
        config = min(free, key=distance)  # min keeps the first of equals: SPACE order breaks ties
        s.pending[config_key(config)] = None  # no trial of its own: tell() adds it as a replayed one
        return Proposal(s.candidate, config, proposer=self.name)

    def _first_unmeasured(self, s: _Study) -> Proposal | None:
        for config, key in zip(s.valid, s.keys):
            if key not in s.tried and key not in s.pending:
                s.pending[key] = None
                return Proposal(s.candidate, config, proposer=self.name)
        return None

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        s = next((s for s in self.studies if s.candidate.sha256 == proposal.candidate.sha256), None)
        if s is None:
            return
        key = config_key(proposal.config)
        value = math.log(outcome.speedup) if outcome.verdict == "pass" and outcome.speedup else None
        s.tried[key] = value
        trial = s.pending.pop(key, None)
        if trial is None:  # replayed from the ledger (resume): teach the study without asking it
            if s.study is not None and s.candidate.space and key in s.valid_keys:
                state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
                s.study.add_trial(optuna.trial.create_trial(params=self._params(s, proposal.config),
                                                            distributions=self._distributions(s),
                                                            value=value, state=state))
            return
        if value is None:
            s.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            s.study.tell(trial, value)


def _neighbours(config: dict, space: dict, valid: list[dict], zero_last: bool, rng: random.Random) -> list[dict]:
    """Valid configs that differ from ``config`` in one knob: a numeric knob moved to the value next to
    it in sorted order (either side; ``_order``), any other knob set to each of its other values;
    shuffled."""
    out = []
    for key, values in space.items():
        if _numeric(values):
            ordered = _order(values, zero_last)
            at = ordered.index(config[key])
            others = [ordered[i] for i in (at - 1, at + 1) if 0 <= i < len(ordered)]
        else:
            others = [v for v in values if v != config[key]]
        out += [dict(config, **{key: v}) for v in others]
    keys = {config_key(c) for c in valid}
    out = [c for c in out if config_key(c) in keys]
    rng.shuffle(out)
    return out


def _numeric(values) -> bool:
    return len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _order(values, zero_last: bool) -> list:
    """Sorted values; with ``zero_last``, 0 (the seeds' "auto") after the largest."""
    return sorted(values, key=lambda v: (zero_last and v == 0, v))
