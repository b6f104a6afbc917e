"""What a new user tripped over (tried 2026-12-01), each fixed and checked: why a faster attempt was not kept,
where an attempt being judged is, the summary a run ends with, a folder given as a candidate, and the file and
line of the user's own kernel in a kernel_exception."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.candidate import load_candidate
from ratchet.judge.evaluation import shape_size
from ratchet.judge import JudgeOptions, evaluate
from ratchet.report.console import outcome_counts, print_run_summary
from ratchet.report.terminal import make_console
from ratchet.run.ledger import Ledger
from ratchet.run.record import record_and_keep
from ratchet.task import load_task
from test_ledger import SOURCE, make_verdict, new_run

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "tasks" / "axpby.py")
TUNABLE = str(DATA / "candidates" / "axpby_tunable.py")
RAISES = DATA / "candidates" / "axpby_raises.py"
SEEDS = Path(__file__).parent.parent / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds"


def ratchet(*args, ledger, timeout=600):
    env = dict(os.environ, RATCHET_LEDGER=str(ledger))
    return subprocess.run([sys.executable, "-m", "ratchet", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


class FakeCandidate:
    def __init__(self, path: str, source: str):
        self.path, self.source = path, source


def test_every_attempt_keeps_the_keep_rules_reason_and_show_says_it(tmp_path):
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path) as led:
        run = new_run(led)
        _, first = record_and_keep(led, run, FakeCandidate("a.py", SOURCE), {"BLOCK": 1}, make_verdict(), "tune")
        # Faster by its medians, but within the best's noise: not kept, and the reason says so.
        faster = make_verdict(speedup=1.6, times=(9.9, 10.4, 9.7))
        _, second = record_and_keep(led, run, FakeCandidate("b.py", SOURCE + "#b\n"), {"BLOCK": 2}, faster, "tune")
        _, failed = record_and_keep(led, run, FakeCandidate("c.py", SOURCE + "#c\n"), {"BLOCK": 3},
                                    make_verdict("fail", reasons=[{"code": "wrong_output", "detail": "off by one"}]),
                                    "tune")
    assert first.keep and not second.keep and not failed.keep
    assert first.reason == "first passing candidate" and "within noise" in second.reason
    shown = ratchet("show", run, "--json", ledger=ledger_path)
    assert shown.returncode == 0, shown.stderr
    reasons = [a["keep_reason"] for a in json.loads(shown.stdout)["attempts"]]
    assert reasons == [first.reason, second.reason, "verdict fail"]
    table = ratchet("show", run, ledger=ledger_path).stdout
    row = next(line for line in table.splitlines() if "b.py" in line)
    assert second.reason in row  # the reason column of a pass that was not kept
    assert "wrong_output: off by one" in next(line for line in table.splitlines() if "c.py" in line)


def test_the_summary_counts_are_the_ledgers(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        run = new_run(led)
        verdicts = [make_verdict(), make_verdict(speedup=1.4, times=(10.1, 10.6, 9.8)),
                    make_verdict("fail", reasons=[{"code": "wrong_output", "detail": "x"}]),
                    make_verdict("fail", reasons=[{"code": "wrong_output", "detail": "y"}]),
                    make_verdict("error", reasons=[{"code": "kernel_exception", "detail": "z"}])]
        for i, verdict in enumerate(verdicts):
            record_and_keep(led, run, FakeCandidate(f"k{i}.py", SOURCE + f"#{i}\n"), {"BLOCK": i}, verdict, "tune")
        attempts, best, info = led.attempts(run), led.best(run), led.get_run(run)
    out = io.StringIO()
    counts = print_run_summary(info, attempts, best, 42.0, make_console(file=out))
    assert counts == outcome_counts(attempts)
    assert counts == {"attempts": 5, "kept": sum(a["kept"] for a in attempts),
                      "passed": sum(a["verdict"] == "pass" for a in attempts),
                      "failed": {"wrong_output": 2}, "errors": {"kernel_exception": 1}}
    text = out.getvalue()
    assert (f"5 attempts in 42 s (judging {5 * 2.25:.0f} s): {counts['kept']} kept, 2 passed, 2 failed "
            "(wrong_output 2), 1 errors (kernel_exception 1)") in text
    # The best's per-shape speedups, and what they are measured against, on which device.
    row = next(line for line in text.splitlines() if "T=7" in line and "H=4096" in line)
    assert "10.00" in row and "15.00" in row and "1.500x" in row
    assert "the task's reference" in text and "eager" in text and "test cpu" in text


def test_the_judge_reports_each_phase_and_shape_in_order():
    seen = []
    task = load_task(TASK)
    verdict = evaluate(task, load_candidate(TUNABLE), None, JudgeOptions(device="cpu", progress=seen.append))
    assert verdict.verdict in ("pass", "fail")
    phases = [p.phase for p in seen]
    assert phases[0] == "import" and set(phases) == {"import", "correctness", "timing", "judged"}
    assert phases == sorted(phases, key=["import", "correctness", "timing", "judged"].index)  # none comes back
    # The verdict is said the moment it is known (a pipelined run records in proposal order, later).
    said = f"pass {verdict.speedup:.3f}x" if verdict.speedup else f"{verdict.verdict} {verdict.reasons[0].code}"
    assert phases.count("judged") == 1 and seen[-1].detail.startswith(said)
    checks = [p for p in seen if p.phase == "correctness"]
    assert [p.step for p in checks] == list(range(1, len(checks) + 1)) and checks[-1].steps == len(checks)
    assert "(first call: compile)" in checks[0].detail and "(first call" not in checks[1].detail
    timed = [p for p in seen if p.phase == "timing"]
    public = task.shape_set("cpu").public
    assert [p.step for p in timed] == list(range(1, len(public) * len(task.dtypes) + 1))
    # Every public shape in every dtype is timed once, the heaviest first (so a loser is raced early).
    rows = [(dict(s), str(d).removeprefix("torch.")) for d in task.dtypes for s in public]
    assert sorted(p.detail for p in timed) == sorted(f"shape {s} {d}" for s, d in rows)
    size = {f"shape {s} {d}": shape_size(task, s, d) for s, d in rows}
    assert [size[p.detail] for p in timed] == sorted((size[p.detail] for p in timed), reverse=True)
    assert all(a.elapsed_s <= b.elapsed_s for a, b in zip(seen, seen[1:]))
    assert all(p.candidate == TUNABLE and p.config == {"CHUNK": 0, "ORDER": "xy"} for p in seen)


def test_a_broken_display_does_not_change_the_verdict():
    def broken(progress):
        raise RuntimeError("display bug")

    verdict = evaluate(load_task(TASK), load_candidate(TUNABLE), None,
                       JudgeOptions(device="cpu", time_it=False, progress=broken))
    assert verdict.verdict == "pass", verdict.reasons


def test_a_folder_given_as_the_candidate_says_it_is_a_folder(tmp_path):
    proc = ratchet("eval", "rmsnorm", str(SEEDS), "--device", "cpu", ledger=tmp_path / "l.sqlite")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == f"ratchet: error: {SEEDS} is a directory; give a candidate file (.py) inside it\n"


def test_a_kernel_exception_names_the_file_and_line_of_the_users_kernel():
    verdict = evaluate(load_task(TASK), load_candidate(RAISES), None, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "error" and [r.code for r in verdict.reasons] == ["kernel_exception"]
    line = next(n for n, text in enumerate(RAISES.read_text().splitlines(), 1) if "raise ValueError" in text)
    assert verdict.reasons[0].detail == f"{RAISES}:{line} in kernel: ValueError: this kernel always fails"


def test_a_triton_kernel_failing_under_the_interpreter_names_the_line_in_its_body(monkeypatch):
    """The interpreter raises from the launch line; the detail names the body's failing line instead."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    body = DATA / "candidates" / "axpby_triton_body_raises.py"
    verdict = evaluate(load_task(TASK), load_candidate(body), None,
                       JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "error" and [r.code for r in verdict.reasons] == ["kernel_exception"]
    line = next(n for n, text in enumerate(body.read_text().splitlines(), 1) if "tl.reshape" in text)
    assert verdict.reasons[0].detail.startswith(f"{body}:{line} in _axpby: InterpreterError: "), verdict.reasons


@pytest.mark.slow
def test_a_piped_run_shows_each_attempts_phases_and_ends_with_a_summary(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    proc = ratchet("run", TASK, "--seed", TUNABLE, "--seed", str(RAISES), "--device", "cpu", "--budget", "2",
                   ledger=ledger)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    run_id = re.search(r"run (r[0-9a-f]{8}) started", out).group(1)
    for phase in ("import", "correctness", "timing", "judged"):  # one line per phase of an attempt, in a pipe
        assert re.search(rf"^\[{run_id}\]   axpby_tunable\.py .*: {phase} .*, [0-9.]+ s", out, re.M), out
    assert re.search(r": correctness shape \{'N': \d+\} float32 \(first call: compile\) \(1/\d+\), [0-9.]+ s, "
                     r"usually \d+ s", out)  # the second attempt on knows the usual time
    attempts = json.loads(ratchet("show", run_id, "--json", ledger=ledger).stdout)["attempts"]
    counts = outcome_counts([dict(a, reasons=a["reasons"]) for a in attempts])
    summary = next(line for line in out.splitlines() if f"run {run_id} summary" in line)
    assert (f"{len(attempts)} attempts in" in summary and f"{counts['kept']} kept, {counts['passed']} passed" in summary
            and f"{sum(counts['errors'].values())} errors" in summary)
    assert "the task's reference" in out and "eager PyTorch" in out
