"""benchmarks/common.py's one results file: every benchmark's rows appended as JSON lines a plot can read."""

import json

from benchmarks.common import command_line, module_env, read_results, record_results, verdict_rows, REPO_ROOT


def test_rows_are_appended_with_benchmark_date_device_and_command(benchmark_results_file):
    assert read_results() == []  # no file yet
    path = record_results("flush_cost", [{"call": "copy", "median_us": 12.5}], device="cpu", command="python -m x")
    record_results("read_floor", [{"size": "16.8 MB", "best_read_us": 8.29}, {"size": "134.2 MB", "best_read_us": 33.4}],
                   device="cpu", command="python -m y --mb 16.8")
    assert path == benchmark_results_file
    lines = benchmark_results_file.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line) for line in lines)
    rows = read_results()
    assert [(r["benchmark"], r["device"], r["command"]) for r in rows] == [
        ("flush_cost", "cpu", "python -m x"), ("read_floor", "cpu", "python -m y --mb 16.8"),
        ("read_floor", "cpu", "python -m y --mb 16.8")]
    assert [r.get("median_us") or r["best_read_us"] for r in rows] == [12.5, 8.29, 33.4]
    assert all(r["date"].startswith("20") and r["date"].endswith("+00:00") for r in rows)


def test_verdict_rows_keep_each_shape_and_its_figures():
    verdict = {"verdict": "pass", "speedup": 1.7, "shapes": [
        {"shape": {"T": 4, "H": 64}, "dtype": "float32", "mode": "eager", "median_us": 10.0, "ref_median_us": 17.0,
         "speedup": 1.7, "achieved_tbps": None, "roofline_fraction": None},
        {"shape": {"T": 7, "H": 96}, "dtype": "float32", "mode": "eager", "median_us": 20.0, "ref_median_us": 30.0,
         "speedup": 1.5}]}
    rows = verdict_rows(verdict, task="rmsnorm", candidate="cpu_torch.py")
    assert [(r["shape"], r["median_us"], r["speedup"], r["verdict"], r["task"]) for r in rows] == [
        ({"T": 4, "H": 64}, 10.0, 1.7, "pass", "rmsnorm"), ({"T": 7, "H": 96}, 20.0, 1.5, "pass", "rmsnorm")]
    assert verdict_rows({"verdict": "error", "shapes": []}) == []


def test_the_command_and_the_child_environment_rerun_a_module_from_anywhere(monkeypatch):
    assert command_line("benchmarks.suite", ["--tasks", "rmsnorm", "a b"]) == "python -m benchmarks.suite --tasks rmsnorm 'a b'"
    monkeypatch.setenv("PYTHONPATH", "/somewhere/src")
    assert module_env()["PYTHONPATH"].split(":") == [str(REPO_ROOT), "/somewhere/src"]
    assert (REPO_ROOT / "benchmarks" / "__init__.py").is_file()
