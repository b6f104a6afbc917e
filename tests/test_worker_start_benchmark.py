"""benchmarks/probes/worker_start.py: forked and executed workers judged side by side on the CPU."""

from pathlib import Path

from benchmarks.probes import worker_start

ROOT = Path(__file__).parent.parent


def test_forked_and_executed_workers_give_the_same_clean_pass(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_BENCH_RESULTS", str(tmp_path / "results.jsonl"))
    data = ROOT / "tests" / "data"
    argv = ["--task", str(data / "tasks" / "axpby.py"), "--candidate", str(data / "candidates" / "axpby_honest.py")]
    assert worker_start.main(argv + ["--device", "cpu", "--repeats", "1", "--no-timing", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| forked | pass |" in out and "| executed | pass |" in out
    assert "every verdict a clean pass both ways" in (tmp_path / "worker_start.md").read_text()
    assert (tmp_path / "results.jsonl").read_text().count('"benchmark": "worker_start"') == 2


def test_a_missing_task_is_one_line_and_exit_2(capsys):
    assert worker_start.main(["--task", "no_such_task", "--candidate", "x.py", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("worker_start: ") and err.count("\n") == 1


def test_a_server_that_refuses_to_fork_fails_the_probe(capsys, tmp_path, monkeypatch):
    """A refusing server leaves the "forked" workers executed: the verdicts agree, and the probe still
    says nothing was forked and exits 1."""
    from ratchet.judge.forkserver import ForkServer

    def refuse(self, env):
        raise OSError("the worker fork server did not start (libcuda.so is mapped)")

    monkeypatch.setenv("RATCHET_BENCH_RESULTS", str(tmp_path / "results.jsonl"))
    monkeypatch.setattr(ForkServer, "__init__", refuse)
    monkeypatch.setattr(ForkServer, "_servers", {})
    monkeypatch.setattr(ForkServer, "_refused", {})
    data = ROOT / "tests" / "data"
    argv = ["--task", str(data / "tasks" / "axpby.py"), "--candidate", str(data / "candidates" / "axpby_honest.py")]
    assert worker_start.main(argv + ["--device", "cpu", "--repeats", "1", "--no-timing"]) == 1
    out = capsys.readouterr().out
    assert "| forked | pass |" in out
    assert "no worker was forked, the server refused: the worker fork server did not start (libcuda.so is mapped)" in out
