"""benchmarks/suite_runs.py: the subset task files it writes, and a real CPU run whose best the suite's
--best argument names; an unknown task is a row with its error while the other tasks still run."""

import json
import sys
from pathlib import Path

import pytest

from ratchet.run.ledger import Ledger
from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import suite_runs  # noqa: E402


@pytest.mark.parametrize("device,field", [("cpu", "cpu"), ("cuda", "gpu")])
def test_subset_task_keeps_the_name_and_the_first_shapes_and_dtype(tmp_path, device, field):
    full = load_task("rmsnorm")
    task = load_task(str(suite_runs.write_subset_task("rmsnorm", device, 2, True, tmp_path)))
    assert task.name == "rmsnorm"
    assert getattr(task, field).public == list(getattr(full, field).public[:2])
    assert task.dtypes == full.dtypes[:1] and len(full.dtypes) == 3
    assert [Path(p).name for p in task.seeds_for("cpu")] == [Path(p).name for p in full.seeds_for("cpu")]


def test_subset_task_without_limits_is_the_whole_task(tmp_path):
    full = load_task("rmsnorm")
    task = load_task(str(suite_runs.write_subset_task("rmsnorm", "cpu", 0, False, tmp_path)))
    assert task.cpu.public == full.cpu.public and task.dtypes == full.dtypes


@pytest.mark.slow
def test_runs_land_in_one_ledger_and_name_their_best(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    code = suite_runs.main(["--tasks", "nosuchtask", "top_p_sampling", "--shapes", "1", "--budget", "1",
                            "--time-per-task", "60", "--device", "cpu", "--ledger", str(ledger),
                            "--out", str(tmp_path)])
    assert code == 0  # one task ran
    rows = json.loads((tmp_path / "runs.json").read_text())["rows"]
    assert rows[0]["task"] == "nosuchtask" and rows[0]["error"].startswith("TaskError: unknown task")
    run = rows[1]
    with Ledger(ledger) as led:
        [recorded] = led.list_runs()
        best = led.best(recorded["id"])
    assert run["run"] == recorded["id"] and run["attempts"] == recorded["attempts"] == 1
    assert recorded["task"] == "top_p_sampling"
    assert run["best_speedup"] == pytest.approx(best["speedup"]) and best["speedup"] > 0
    assert (tmp_path / "suite_best_args.txt").read_text().split() == ["--best", f"top_p_sampling={run['run']}"]
    assert f"| top_p_sampling | {run['run']} | 1 |" in (tmp_path / "runs.md").read_text()


def test_no_task_ran_is_exit_1(tmp_path):
    code = suite_runs.main(["--tasks", "nosuchtask", "--device", "cpu", "--ledger", str(tmp_path / "l.sqlite"),
                            "--out", str(tmp_path)])
    assert code == 1
    assert "nosuchtask" in (tmp_path / "runs.md").read_text()
