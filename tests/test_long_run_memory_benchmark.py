"""benchmarks/long_run_memory.py: a short CPU run through the real loop, and its bounds on synthetic rows."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

from benchmarks.probes import long_run_memory  # noqa: E402
from benchmarks.probes.long_run_memory import Sample, problems, table  # noqa: E402


@pytest.mark.slow
def test_a_short_cpu_run_is_flat_and_leaves_no_process(capsys, tmp_path):
    code = long_run_memory.main(["--task", str(ROOT / "tests" / "data" / "tasks" / "axpby.py"),
                                 "--seeds", str(ROOT / "tests" / "data" / "candidates" / "axpby_honest.py"),
                                 "--device", "cpu", "--attempts", "5", "--no-timing", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "axpby: 5 attempts" in out and "verdicts {'pass': 5}" in out
    assert "processes left after the run: 0" in out
    assert "host RSS of the judge (MiB)" in out and (tmp_path / "long_run_memory.json").exists()


@pytest.mark.slow
def test_a_run_resumed_in_its_ledger_reaches_its_attempts_with_new_files(capsys, tmp_path):
    ledger = tmp_path / "long.sqlite"
    common = ["--task", str(ROOT / "tests" / "data" / "tasks" / "axpby.py"),
              "--seeds", str(ROOT / "tests" / "data" / "candidates" / "axpby_honest.py"),
              "--device", "cpu", "--no-timing", "--ledger", str(ledger)]
    assert long_run_memory.main(common + ["--attempts", "2"]) == 0  # a first call judges 2 of the run's 4
    assert long_run_memory.main(common + ["--attempts", "4", "--resume", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "axpby: 2 attempts" in out and "the run now holds 4 attempts (2 from earlier calls)" in out
    from ratchet.run.ledger import Ledger
    with Ledger(ledger) as opened:
        (run,) = opened.list_runs()
        attempts = opened.attempts(run["id"])
    assert [a["verdict"] for a in attempts] == ["pass"] * 4
    assert len({a["source_sha256"] for a in attempts}) == 4  # the resumed proposer numbered on, no repeat


def test_resume_without_a_ledger_file_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        long_run_memory.main(["--task", "rmsnorm", "--device", "cpu", "--resume", "--ledger", str(tmp_path / "none")])
    assert exit_.value.code == 2 and "--resume needs --ledger" in capsys.readouterr().err


def _samples(rss, seconds, gpu=None, tensors=None):
    gpu, tensors = gpu or [None] * len(rss), tensors or [None] * len(rss)
    return [Sample(i + 1, r, g, t, s, "pass") for i, (r, s, g, t) in enumerate(zip(rss, seconds, gpu, tensors))]


def test_gpu_growth_is_at_rest_not_in_flight():
    # Samples in flight follow the evaluations alive (each worker a CUDA context, ~870 MiB on the H200,
    # 2026-12-04): a last quarter sampled with more of them alive is not a leak; memory left at rest is.
    in_flight = [1100.0 + 870 * n for n in (0, 2, 0, 1, 1, 0, 2, 1, 2, 2, 1, 2, 2, 1, 2, 0)]
    flat = table(_samples([300.0] * 16, [2.0] * 16, in_flight), gpu_at_rest=(1101.0, 1117.0))
    assert problems(flat, 16, 256, 1.5, 0) == []
    (during,) = [r for r in flat if r["metric"] == "GPU memory used in flight"]
    assert during["growth"] is None and during["max"] == 1100.0 + 2 * 870
    (rest,) = [r for r in flat if r["metric"] == "GPU memory used at rest"]
    assert rest["growth"] == 16.0
    leaked = table(_samples([300.0] * 16, [2.0] * 16, in_flight), gpu_at_rest=(1101.0, 1901.0))
    assert problems(leaked, 16, 256, 1.5, 0) == ["GPU memory used at rest grew 800 MiB (bound 256 MiB)"]


def test_the_judges_own_cuda_tensors_are_bounded_by_their_quarters():
    # The judge's live tensors after each attempt: a few MiB that come and go are flat; a tensor kept per
    # attempt is a leak whatever the device's used memory says.
    steady = table(_samples([300.0] * 40, [2.0] * 40, [1100.0] * 40, [8.0, 12.0] * 20))
    assert problems(steady, 40, 256, 1.5, 0) == []
    (row,) = [r for r in steady if r["metric"] == "the judge's live CUDA tensors"]
    assert row["growth"] == 0.0 and row["max"] == 12.0
    kept = table(_samples([300.0] * 40, [2.0] * 40, [1100.0] * 40, [16.0 * i for i in range(40)]))
    assert problems(kept, 40, 256, 1.5, 0) == ["the judge's live CUDA tensors grew 480 MiB (bound 256 MiB)"]


def test_growth_and_slowdown_beyond_the_bounds_are_named():
    flat = table(_samples([300.0] * 40, [2.0] * 40))
    assert problems(flat, 40, 256, 1.5, 0) == []
    leaking = table(_samples([300.0 + 10 * i for i in range(40)], [2.0] * 40))
    assert problems(leaking, 40, 256, 1.5, 0) == ["host RSS of the judge grew 300 MiB (bound 256 MiB)"]  # quarter medians 345 and 645
    slower = table(_samples([300.0] * 40, [2.0] * 20 + [4.0] * 20))
    assert problems(slower, 40, 256, 1.5, 0) == ["the judge slowed from 2.0 to 4.0 s per attempt (bound 1.50x)"]
    assert problems(slower[:1], 5, 256, 1.5, 2) == ["2 process(es) of the run outlived it"]


def test_slope_is_the_least_squares_change_per_attempt():
    assert long_run_memory.slope([1.0, 3.0, 5.0, 7.0]) == pytest.approx(2.0)
    assert long_run_memory.slope([4.0]) == 0.0


def test_bad_usage_is_one_line_and_exit_2(capsys):
    assert long_run_memory.main(["--task", "no_such_task", "--device", "cpu", "--attempts", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("long_run_memory: ") and err.count("\n") == 1


def test_a_ledger_that_is_no_ledger_is_one_line_and_exit_2_and_left_as_it_was(tmp_path, capsys):
    bad = tmp_path / "long.sqlite"
    bad.write_text("not a ledger\n")
    code = long_run_memory.main(["--task", str(ROOT / "tests" / "data" / "tasks" / "axpby.py"),
                                 "--seeds", str(ROOT / "tests" / "data" / "candidates" / "axpby_honest.py"),
                                 "--device", "cpu", "--attempts", "2", "--no-timing", "--ledger", str(bad), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("long_run_memory: ") and "not a Ratchet ledger" in err
    assert err.count("\n") == 1 and bad.read_text() == "not a ledger\n"
