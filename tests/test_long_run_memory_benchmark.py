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


def _samples(rss, seconds):
    return [Sample(i + 1, r, None, s, "pass") for i, (r, s) in enumerate(zip(rss, seconds))]


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
