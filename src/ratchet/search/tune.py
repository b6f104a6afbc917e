"""The tuner: Optuna over a candidate's SPACE. The model or the person writes the idea; search picks
the block sizes, warps and stages, which it does better than anyone.

- The seed's defaults (the first value of every SPACE list) are tried first.
- No config is measured twice: a repeat suggestion is answered from what was already measured.
- Configs that fail or error are recorded and told to the study as failed trials.
- Constraints between parameters come from the candidate's ``CONSTRAINTS`` (expressions over SPACE
  names, e.g. ``"BLOCK_N % BLOCK_K == 0"``); configs breaking one are never proposed.
Samplers: TPE (default), random, or grid (exhaustive, what ``triton.autotune`` does).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import optuna

from ratchet.candidate import Candidate
from ratchet.ledger import config_key
from ratchet.search.base import Outcome, Proposal

optuna.logging.set_verbosity(logging.WARNING)

SAMPLERS = ("tpe", "random", "grid")


@dataclass
class _Study:
    candidate: Candidate
    study: optuna.Study | None  # None: exhaustive grid
    valid: list[dict]  # every config that meets the constraints, in SPACE order
    tried: dict  # config key -> objective value (None for failed)
    pending: dict  # config key -> optuna trial waiting for its outcome


class TuneProposer:
    """Round-robin over the seeds; for each, an Optuna study over its SPACE."""

    name = "tune"

    def __init__(self, candidates: list[Candidate], sampler: str = "tpe", seed: int = 0):
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler '{sampler}' (choose from {', '.join(SAMPLERS)})")
        self.studies = [self._new_study(c, sampler, seed + i) for i, c in enumerate(candidates)]
        self._turn = 0

    @staticmethod
    def _new_study(candidate: Candidate, sampler: str, seed: int) -> _Study:
        valid = candidate.valid_configs()
        if sampler == "grid":
            # Exhaustive in SPACE order, like triton.autotune. Optuna's GridSampler stops the study
            # itself when the grid is done, which ask-and-tell use does not allow, so no study drives it.
            return _Study(candidate, None, valid, {}, {})
        if sampler == "random":
            chosen = optuna.samplers.RandomSampler(seed=seed)
        else:
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, len(valid) // 4)))
        study = optuna.create_study(direction="maximize", sampler=chosen)
        if candidate.space and valid:
            study.enqueue_trial(valid[0] if candidate.default_config() not in valid else candidate.default_config())
        return _Study(candidate, study, valid, {}, {})

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
        valid_keys = {config_key(c) for c in s.valid}
        if s.study is None:
            return self._first_unmeasured(s)
        # Bounded: each loop either proposes, or answers a repeat/invalid suggestion without measuring.
        for _ in range(20 * max(1, len(s.valid))):
            if len(s.tried) + len(s.pending) >= len(s.valid):
                return None
            trial = s.study.ask()
            config = {k: trial.suggest_categorical(k, list(v)) for k, v in s.candidate.space.items()}
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
        # The sampler keeps repeating itself: take the first config nobody measured yet.
        return self._first_unmeasured(s)

    def _first_unmeasured(self, s: _Study) -> Proposal | None:
        for config in s.valid:
            key = config_key(config)
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
            if s.study is not None and s.candidate.space and key in {config_key(c) for c in s.valid}:
                dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in s.candidate.space.items()}
                state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
                s.study.add_trial(optuna.trial.create_trial(params=proposal.config, distributions=dists,
                                                            value=value, state=state))
            return
        if value is None:
            s.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            s.study.tell(trial, value)
