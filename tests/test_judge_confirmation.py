"""Checks that noise can fail are confirmed before a candidate is rejected: a sampling task's distribution
test (chance) and the outside clock (a worker that lost a time slice) fail an honest kernel now and then,
while hidden work and a biased sampler fail every time. A failure repeated on fresh draws or on a second
measurement rejects; one that does not repeat passes, says so in the verdict's notes, and the second
measurement's times stand."""

from dataclasses import replace
from pathlib import Path

import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.evaluation import Abort, Evaluation
from ratchet.judge.verdict import Reason
from ratchet.task import load_task

DATA = Path(__file__).parent / "data"


def judge(task, candidate: str, time_it: bool = False):
    """``task``: a test task's name, or a Task."""
    task = load_task(str(DATA / "tasks" / f"{task}.py")) if isinstance(task, str) else task
    return evaluate(task, load_candidate(DATA / "candidates" / candidate), {}, JudgeOptions(device="cpu", time_it=time_it))


def failing(monkeypatch, method: str, times: int, make_failure):
    """Make ``Evaluation.method`` fail its first ``times`` calls with ``make_failure(call)``; returns the
    calls seen."""
    real = getattr(Evaluation, method)
    calls = []

    def patched(self, *args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            return make_failure(self, *args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Evaluation, method, patched)
    return calls


def statistical_failure(times: int):
    """The coin task with a rule that fails its first ``times`` applications, and the list of the pairs'
    counts it was applied to."""
    task = load_task(str(DATA / "tasks" / "coin_flips.py"))
    rule = task.check
    applied = []

    def test(pairs):
        applied.append(len(pairs))
        return ["forced failure"] if len(applied) <= times else rule.test(pairs)

    return replace(task, check=replace(rule, test=test)), applied


def test_an_honest_sampler_passes_the_distribution_test():
    v = judge("coin_flips", "coin_flips_honest.py")
    assert v.verdict == "pass", v.reasons
    assert not any("second" in note for note in v.notes)
    # Where the correctness phase went: the worker's own parts of its calls (inputs, launch, fetch, ...)
    # lie inside the round trips, and the rule's test is counted apart from the judge's checks.
    host = v.judge_host_s
    worker = [host[f"calls_{part}"] for part in ("inputs", "prepare", "launch", "sync", "checks", "fetch")]
    assert all(s >= 0.0 for s in worker) and host["calls_inputs"] > 0.0 and host["calls_fetch"] > 0.0
    assert sum(worker) <= host["calls"]
    assert 0.0 < host["rule_test"] <= v.phases_s["correctness"]


def test_a_biased_sampler_fails_on_both_sets_of_draws():
    v = judge("coin_flips", "coin_flips_biased.py")
    assert v.verdict == "fail" and {r.code for r in v.reasons} == {"statistical"}, v.reasons
    assert "ones where" in v.reasons[0].detail and "(and on a second, independent set of draws)" in v.reasons[0].detail


def test_a_distribution_test_failed_once_is_confirmed_on_fresh_draws():
    task, applied = statistical_failure(times=1)
    v = judge(task, "coin_flips_honest.py")
    assert v.verdict == "pass", v.reasons
    # the first shape's 8 calls failed, 8 fresh calls passed, then the second shape (2 calls of 2048 draws)
    assert applied == [8, 8, 2]
    assert [n for n in v.notes if "second" in n] == [
        "shape {'N': 512} float32: the distribution test failed once (forced failure) and passed on a second, "
        "independent set of draws"]


def test_a_distribution_test_failed_twice_rejects():
    task, applied = statistical_failure(times=2)
    v = judge(task, "coin_flips_honest.py")
    assert v.verdict == "fail" and [r.code for r in v.reasons] == ["statistical"]
    assert v.reasons[0].detail == ("shape {'N': 512} float32: forced failure (and on a second, independent set "
                                   "of draws)")
    assert applied == [8, 8]  # nothing else was checked


def clock_failure(self, cand_median_us, overhead, gaps, label):
    raise Abort([Reason("clock_mismatch", f"{label}: forced")])


def test_a_clock_mismatch_once_is_measured_again_and_the_second_times_stand(monkeypatch):
    checks = failing(monkeypatch, "_clock_check", 1, clock_failure)
    runs = []
    real_measure = Evaluation._measure_held

    def measured(self, *args):
        run = real_measure(self, *args)
        runs.append(list(run["times"]["cand"]))
        return run

    monkeypatch.setattr(Evaluation, "_measure_held", measured)
    v = judge("axpby", "axpby_honest.py", time_it=True)
    assert v.verdict == "pass", v.reasons
    timed = [row for row in v.shapes if not row.held_out]
    # the first timed shape was measured twice, the others once; its verdict's times are the second's
    assert len(runs) == len(timed) + 1 and len(checks) == len(timed) + 1
    first = next(row for row in timed if row.times_us == runs[1])
    assert first.times_us != runs[0]
    notes = [n for n in v.notes if "second measurement" in n]
    assert len(notes) == 1 and notes[0].endswith("(eager): forced: not so on a second measurement, whose times stand")


def test_a_clock_mismatch_twice_rejects(monkeypatch):
    failing(monkeypatch, "_clock_check", 2, clock_failure)
    v = judge("axpby", "axpby_honest.py", time_it=True)
    assert v.verdict == "fail" and [r.code for r in v.reasons] == ["clock_mismatch"]
    assert v.reasons[0].detail.endswith("(eager): forced (and again on a second measurement)")


@pytest.mark.parametrize("times, verdict", [(1, "pass"), (2, "fail")])
def test_the_timed_calls_distribution_test_is_confirmed_on_a_second_measurement(monkeypatch, times, verdict):
    failing(monkeypatch, "_verify_timed", times, lambda self, *args: ["forced failure"])
    v = judge("coin_flips", "coin_flips_honest.py", time_it=True)
    assert v.verdict == verdict, v.reasons
    if verdict == "fail":
        assert [r.code for r in v.reasons] == ["timed_output_wrong"]
        assert v.reasons[0].detail.endswith("(eager): timed calls: forced failure (and again on a second measurement)")
    else:
        assert any(n.endswith("timed calls: forced failure: not so on a second measurement, whose times stand")
                   for n in v.notes), v.notes
