"""Landscape mode and the search-efficiency replay (benchmarks/), and the tuner's ordinal knobs."""

import math
import sys
from pathlib import Path

import optuna
import pytest

from ratchet.candidate import load_candidate
from ratchet.run.ledger import config_key
from ratchet.search.base import Outcome, Proposal
from ratchet.search.tune import TuneProposer, TuneSettings
from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from landscape import LandscapeOptions, measure_landscape, restricted_task  # noqa: E402
from search_efficiency import replay, table_candidate  # noqa: E402

SPACE_SOURCE = '''
SPACE = {"BLOCK": [256, 64, 0, 1024], "WARPS": [4, 1, 16], "ORDER": ["xy", "yx"]}
CONSTRAINTS = ["BLOCK == 0 or BLOCK >= 16 * WARPS"]

def kernel(x, BLOCK=256, WARPS=4, ORDER="xy"):
    return x
'''


@pytest.fixture
def candidate(tmp_path):
    path = tmp_path / "cand.py"
    path.write_text(SPACE_SOURCE)
    return load_candidate(path)


def test_grid_replay_counts_trials_and_seconds_by_hand(candidate):
    # The best (BLOCK=0, WARPS=1, any ORDER) is the 13th valid config in SPACE order: BLOCK=256 gives 6
    # (256 >= 16*16), BLOCK=64 gives 4 (WARPS 4 and 1, not 16, times two ORDERs), then 0/4/xy, 0/4/yx, 0/1/xy.
    rows = [{"config": c, "verdict": "pass", "speedup": 3.0 if (c["BLOCK"], c["WARPS"]) == (0, 1) else 1.0,
             "landscape_s": 0.5} for c in candidate.valid_configs()]
    table = {"task": "t", "seed_file": candidate.path, "device": "made up", "rows": rows}
    assert len(rows) == 6 + 4 + 6 + 6
    assert replay(table, "grid", 0) == (13, 6.5)
    assert replay(table, "grid", 0, judge_s=20.0) == (13, 260.0)


@pytest.mark.parametrize("settings", [TuneSettings(ordinal=True, zero_last=False),
                                      TuneSettings(ordinal=True, zero_last=True, multivariate=True)])
def test_ordinal_tpe_stays_in_space_never_repeats_and_tries_the_default_first(candidate, settings):
    valid = {config_key(c) for c in candidate.valid_configs()}
    proposer = TuneProposer([candidate], sampler="tpe", seed=5, settings=settings)
    seen = []
    while (proposal := proposer.propose()) is not None:
        config = proposal.config
        seen.append(config_key(config))
        assert all(config[k] in candidate.space[k] for k in candidate.space)
        assert not candidate.broken_constraints(config)
        speed = 2.0 - abs(math.log2((config["BLOCK"] or 4096) / 1024)) * 0.2 - config["WARPS"] * 0.01
        proposer.tell(proposal, Outcome("pass", speed))
    assert seen[0] == config_key(candidate.default_config())
    assert len(seen) == len(set(seen)) == len(valid) and set(seen) == valid
    # The numeric knobs really are ordinal (an index into the sorted values), the string one is not.
    dists = proposer.studies[0].study.trials[0].distributions
    assert isinstance(dists["BLOCK"], optuna.distributions.IntDistribution)
    assert isinstance(dists["WARPS"], optuna.distributions.IntDistribution)
    assert isinstance(dists["ORDER"], optuna.distributions.CategoricalDistribution)
    zero_at = proposer.studies[0].orders["BLOCK"].index(0)
    assert zero_at == (3 if settings.zero_last else 0)


def test_neighbours_of_the_default_come_right_after_it(candidate):
    # BLOCK 256 sits between 64 and 1024 (0 sorts last); WARPS 4 between 1 and 16; ORDER is not numeric.
    # BLOCK=64 with WARPS=4 is valid (64 >= 64); all five neighbours are.
    expected = {config_key(dict(candidate.default_config(), **change)) for change in
                ({"BLOCK": 64}, {"BLOCK": 1024}, {"WARPS": 1}, {"WARPS": 16}, {"ORDER": "yx"})}
    orders = []
    for seed in range(3):
        proposer = TuneProposer([candidate], sampler="tpe", seed=seed)
        seen = []
        for _ in range(6):
            proposal = proposer.propose()
            seen.append(config_key(proposal.config))
            proposer.tell(proposal, Outcome("pass", 1.0 + 0.1 * len(seen)))
        assert seen[0] == config_key(candidate.default_config())
        assert set(seen[1:]) == expected
        orders.append(seen[1:])
    assert len({tuple(o) for o in orders}) > 1  # the order is drawn from the search seed
    # Off for large SPACEs (and for random search): the second proposal is then the sampler's.
    for proposer in (TuneProposer([candidate], sampler="tpe", seed=0, settings=TuneSettings(neighbours_below=0)),
                     TuneProposer([candidate], sampler="random", seed=0)):
        assert len(proposer.studies[0].study.get_trials(deepcopy=False)) == 1  # the default, queued
        first = proposer.propose()
        assert first.config == candidate.default_config()
        proposer.tell(first, Outcome("pass", 1.0))
        waiting = [t for t in proposer.studies[0].study.get_trials(deepcopy=False)
                   if t.state == optuna.trial.TrialState.WAITING]
        assert waiting == []


def test_replay_searches_only_the_configs_a_table_measured(candidate):
    valid = candidate.valid_configs()
    rows = [{"config": c, "verdict": "pass", "speedup": 1.0 + i / 100, "landscape_s": 1.0}
            for i, c in enumerate(valid)]
    cut = rows[:-2]  # a run stopped before its last two configs
    table = {"task": "t", "seed_file": candidate.path, "device": "made up", "rows": cut}
    replayed = table_candidate(table)
    assert [config_key(c) for c in replayed.valid_configs()] == [config_key(r["config"]) for r in cut]
    for seed in range(3):  # every proposal has a row: no KeyError, and the best measured one is reached
        trials, _ = replay(table, "tpe", seed)
        assert 1 <= trials <= len(cut)


def test_ordinal_resume_teaches_the_study_and_skips_what_was_measured(candidate):
    settings = TuneSettings(ordinal=True)
    done = candidate.valid_configs()[:7]
    resumed = TuneProposer([candidate], seed=2, settings=settings)
    for config in done:  # replayed from the ledger
        resumed.tell(Proposal(candidate, config), Outcome("pass", 1.5))
    complete = resumed.studies[0].study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 7 and all(isinstance(t.params["BLOCK"], int) for t in complete)
    more = []
    while (proposal := resumed.propose()) is not None:
        more.append(config_key(proposal.config))
        resumed.tell(proposal, Outcome("pass", 1.0))
    assert not set(more) & {config_key(c) for c in done}
    assert len(more) == len(candidate.valid_configs()) - 7


SCALED_RMSNORM = '''
import torch

SPACE = {"SCALE": [1, 2], "ROWS": [0, 1]}


def kernel(x, weight, eps, SCALE=1, ROWS=0):
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (out * SCALE).to(x.dtype)
'''


def test_landscape_on_the_cpu_measures_every_valid_config_and_catches_wrong_ones(tmp_path):
    path = tmp_path / "scaled.py"
    path.write_text(SCALED_RMSNORM)
    cand = load_candidate(path)
    task = restricted_task(load_task("rmsnorm"), "cpu", 1)
    assert len(task.cpu.public) == 1 and len(task.dtypes) == 1
    rows = measure_landscape(task, cand, LandscapeOptions(device="cpu", shapes=1))
    assert [r["config"] for r in rows] == cand.valid_configs()
    for row in rows:
        assert row["landscape_s"] > 0
        if row["config"]["SCALE"] == 1:
            assert row["verdict"] == "pass" and math.isfinite(row["speedup"]) and row["speedup"] > 0
            assert len(row["shapes"]) == 1 and row["shapes"][0]["cand_us"] > 0 and row["shapes"][0]["ref_us"] > 0
        else:  # twice the right answer: the task's tolerance rejects it
            assert row["verdict"] == "fail" and row["speedup"] is None and "wrong_output" in row["reason"]


def test_landscape_of_a_builtin_cpu_seed_has_finite_positive_speedups():
    seed = ROOT / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds" / "cpu_torch.py"
    cand = load_candidate(seed)
    rows = measure_landscape(restricted_task(load_task("rmsnorm"), "cpu", 1), cand,
                             LandscapeOptions(device="cpu", shapes=1))
    assert len(rows) == len(cand.valid_configs()) == 4
    assert all(r["verdict"] == "pass" and math.isfinite(r["speedup"]) and r["speedup"] > 0 for r in rows)
