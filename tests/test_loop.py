"""The loop as users run it: resume after SIGKILL with nothing lost or repeated, clean errors, the
CPU demo end to end on a tiny budget, and `ratchet best` files that `ratchet eval` passes."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_line_refusal import run_cli

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "tasks" / "axpby.py")
TUNABLE = str(DATA / "candidates" / "axpby_tunable.py")


def ratchet(*args, ledger, timeout=600, cwd=None):
    env = dict(os.environ, RATCHET_LEDGER=str(ledger))
    return subprocess.run([sys.executable, "-m", "ratchet", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def runs(ledger):
    proc = ratchet("runs", "--json", ledger=ledger)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def attempts(ledger, run_id):
    with sqlite3.connect(ledger) as conn:
        return conn.execute("SELECT seq, source_sha256, config_key, verdict FROM attempts WHERE run_id = ? "
                            "ORDER BY seq", (run_id,)).fetchall()


def test_resume_after_sigkill_loses_and_repeats_nothing(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    env = dict(os.environ, RATCHET_LEDGER=str(ledger))
    budget = 4  # of the tunable seed's 8 configs: two kills after an attempt each, then the resume's
    rng = random.Random(7)
    killed_at = []
    for _ in range(2):
        cmd = [sys.executable, "-m", "ratchet", "run"]
        cmd += ["--resume", runs(ledger)[0]["id"]] if ledger.exists() and runs(ledger) else \
            [TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", str(budget), "--sampler", "random"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        # Kill at a random moment once at least one attempt is in (or the first run is under way).
        deadline = time.time() + 120
        while time.time() < deadline and (not ledger.exists() or not runs(ledger) or runs(ledger)[0]["attempts"] < 1
                                          + len(killed_at)):
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 3.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at.append(runs(ledger)[0]["attempts"])
    run = runs(ledger)[0]
    assert run["status"] == "gone"  # killed: the ledger says running, its process is gone
    before = attempts(ledger, run["id"])
    assert [row[0] for row in before] == list(range(1, len(before) + 1))
    done = ratchet("run", "--resume", run["id"], ledger=ledger)
    assert done.returncode == 0, done.stderr
    after = attempts(ledger, run["id"])
    assert after[:len(before)] == before  # nothing recorded was lost or changed
    assert len(after) == budget and [row[0] for row in after] == list(range(1, budget + 1))
    assert len({(row[1], row[2]) for row in after}) == budget  # no config judged twice
    assert all(row[3] == "pass" for row in after)
    final = runs(ledger)[0]
    assert final["status"] == "done" and final["attempts"] == budget and final["best_speedup"] > 0
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_resume_of_finished_or_unknown_run_is_a_usage_error(tmp_path, capsys, monkeypatch):
    ledger = tmp_path / "ledger.sqlite"
    first = ratchet("run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1", ledger=ledger)
    assert first.returncode == 0, first.stderr
    run_id = runs(ledger)[0]["id"]
    size = ledger.stat().st_size
    monkeypatch.setenv("RATCHET_LEDGER", str(ledger))  # the refusals in this process: none starts a worker
    for args, needle in ((("run", "--resume", run_id), "is finished"),
                         (("run", "--resume", "rnope"), "unknown run"),
                         (("show", "rnope"), "unknown run"),
                         (("best", "rnope", "-o", str(tmp_path / "b.py")), "unknown run"),
                         (("run", TASK, "--resume", run_id), "not both"),
                         (("run", TASK, "--budget", "0x"), "invalid int"),
                         (("run", TASK, "--time", "soon"), "not a duration"),
                         (("run", TASK, "--target", "fast"), "not a speedup"),
                         (("run", TASK, "--budget", "2", "--time", "1h"), "not allowed with")):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and err.count("\n") == 1 and needle in err, (args, err)
    assert len(attempts(ledger, run_id)) == 1 and ledger.stat().st_size >= size


def test_ledger_from_newer_schema_is_refused_untouched(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    assert ratchet("run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1", ledger=ledger).returncode == 0
    conn = sqlite3.connect(ledger)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()  # the last connection checkpoints the WAL into the file: read it only after
    before = ledger.read_bytes()
    for args in (("runs",), ("run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1")):
        proc = ratchet(*args, ledger=ledger)
        assert proc.returncode == 2 and "newer" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert ledger.read_bytes() == before


@pytest.mark.slow
def test_cpu_demo_end_to_end_and_best_file_passes_eval(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    proc = ratchet("run", "top_p_sampling", "--device", "cpu", "--budget", "2", ledger=ledger, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = runs(ledger)[0]
    assert run["task"] == "top_p_sampling" and run["attempts"] == 2 and run["status"] == "done"
    assert run["best_speedup"] and run["best_speedup"] > 0
    show = ratchet("show", run["id"], "--json", ledger=ledger)
    data = json.loads(show.stdout)
    assert [a["seq"] for a in data["attempts"]] == [1, 2] and data["best_history"]
    best = tmp_path / "best.py"
    assert ratchet("best", run["id"], "-o", str(best), ledger=ledger).returncode == 0
    judged = subprocess.run([sys.executable, "-m", "ratchet", "eval", "top_p_sampling", str(best), "--device",
                             "cpu", "--json", "--no-timing"], capture_output=True, text=True, timeout=600)
    assert judged.returncode == 0 and json.loads(judged.stdout)["verdict"] == "pass", judged.stdout[-2000:]
