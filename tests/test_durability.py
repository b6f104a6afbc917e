"""Durability: SIGKILL at random moments (some inside a ledger write), then resume, loses and repeats
nothing; a killed run reads ``gone``; full disks, read-only and damaged ledgers get one line, never a
traceback; the ledger is backed up at each run start and ``ratchet doctor`` restores it."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratchet.run.doctor import examine
from ratchet.run.ledger import GONE, Ledger, list_backups

HERE = Path(__file__).parent
DRIVER = str(HERE / "durability_driver.py")
TASK = str(HERE / "data" / "tasks" / "axpby.py")
TUNABLE = str(HERE / "data" / "candidates" / "axpby_tunable.py")
CONFIGS = 150  # attempts of the ledger driver's run: more than 20 kills let it make
LEDGER_KILLS = 20


class Lines:
    """The lines a child writes on its stdout (stderr merged), read with a deadline."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.buffer, self.lines, self.cursor = proc, b"", [], 0

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self.buffer += chunk
        *whole, self.buffer = self.buffer.split(b"\n")
        self.lines += [w.decode() for w in whole]
        return True

    def wait_for(self, predicate, timeout: float = 60.0) -> bool:
        """Read until a line not seen by an earlier call meets ``predicate`` (True), or the child ends or
        time runs out (False)."""
        deadline = time.monotonic() + timeout
        while True:
            while self.cursor < len(self.lines):
                self.cursor += 1
                if predicate(self.lines[self.cursor - 1]):
                    return True
            if time.monotonic() > deadline or not self._pump(min(0.05, max(0.0, deadline - time.monotonic()))):
                return False

    def drain(self) -> list[str]:
        """Every whole line, once the child is dead (a line cut by the kill has no newline: not counted)."""
        while self._pump(0.5):
            pass
        return self.lines


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the judge's workers too
    proc.wait()


def committed(lines: list[str]) -> dict[int, dict]:
    return {int(line.split()[1]): json.loads(line.split(maxsplit=2)[2]) for line in lines if line.startswith("committed ")}


def check_ledger(path: Path, seen: dict[int, dict], note: str) -> dict:
    """The invariants after a kill: a whole file, seqs 1..n, each (source, config) once, every attempt a
    parent saw committed still there with its config, the best the keep rule's, a dead run 'gone'."""
    with Ledger(path) as led:
        conn = led._conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", note
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == [], note
        runs = led.list_runs()
        assert len(runs) <= 1, note
        if not runs:
            assert not seen, note
            return {}
        run = runs[0]
        attempts = led.attempts(run["id"])
        seqs = [a["seq"] for a in attempts]
        assert seqs == list(range(1, len(seqs) + 1)), note
        assert len({(a["source_sha256"], json.dumps(a["config"])) for a in attempts}) == len(attempts), note
        by_seq = {a["seq"]: a["config"] for a in attempts}
        for seq, config in seen.items():
            assert by_seq.get(seq) == config, f"{note}: committed attempt {seq} {config} lost or changed"
        # Attempts go in config order, so the best is the first of the highest speedups recorded.
        passing = [a for a in attempts if a["verdict"] == "pass"]
        best = led.best(run["id"])
        if passing:
            top = max(a["speedup"] for a in passing)
            assert best is not None and best["id"] == next(a["id"] for a in passing if a["speedup"] == top), note
        else:
            assert best is None, note
        assert all(h["attempt_id"] in {a["id"] for a in passing} for h in led.best_history(run["id"])), note
        return {"run": run, "attempts": attempts}


def test_sigkill_of_a_ledger_writer_at_20_random_moments_then_resume(tmp_path):
    path = tmp_path / "ledger.sqlite"
    rng = random.Random(20261201)
    seen: dict[int, dict] = {}
    moments = []
    for k in range(LEDGER_KILLS):
        run = check_ledger(path, seen, "before") if path.exists() else {}
        argv = [sys.executable, DRIVER, "ledger", str(path), str(CONFIGS)] + ([run["run"]["id"]] if run else [])
        # Kills inside a write sleep there long enough to be sure to land in the transaction.
        moment = ("startup", "in-write", "anywhere", "in-write", "anywhere")[k % 5]
        env = dict(os.environ, DRIVER_WRITE_SLEEP_S="0.3" if moment == "in-write" else "0.01")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        lines = Lines(proc)
        try:
            if moment == "startup":  # importing, backing up, creating or claiming the run
                time.sleep(rng.uniform(0.0, 0.6))
            elif moment == "in-write":
                assert lines.wait_for(lambda s: s.startswith("run "))
                for _ in range(rng.randint(0, 2)):  # let a few attempts commit first
                    assert lines.wait_for(lambda s: s.startswith("committed "))
                # Mostly inside the write of an attempt (and its keep decision), once in a while another.
                target = "in-write record_attempt" if k % 10 != 1 else "in-write"
                assert lines.wait_for(lambda s: s.startswith(target)), lines.lines[-5:]
                moment = lines.lines[lines.cursor - 1]
            else:
                assert lines.wait_for(lambda s: s.startswith("run "))
                time.sleep(rng.uniform(0.0, 0.5))
        finally:
            kill(proc)
        output = lines.drain()
        assert "done" not in output, "the run finished before it was killed: kill sooner"
        new = committed(output)
        assert not set(new) & set(seen), f"kill {k}: seq numbers committed twice: {sorted(set(new) & set(seen))}"
        seen.update(new)
        moments.append((moment, len(new)))
        state = check_ledger(path, seen, f"kill {k} ({moment})")
        if state:
            assert state["run"]["status"] == GONE, f"kill {k}: a killed run must read 'gone'"
    print("kills (moment, attempts committed before it):", moments, "recorded:", len(seen))
    assert sum(1 for m, _ in moments if m == "in-write record_attempt") >= 6
    assert 0 < len(seen) < CONFIGS

    # The doctor stores the dead run as stopped; a stopped run resumes.
    report = examine(path)
    assert report.exit_code == 0 and any("is gone: marked stopped" in f.text for f in report.findings)
    with Ledger(path) as led:
        run_id = led.list_runs()[0]["id"]
        assert led.get_run(run_id)["status"] == "stopped"
    final = subprocess.run([sys.executable, DRIVER, "ledger", str(path), str(CONFIGS), run_id],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, DRIVER_WRITE_SLEEP_S="0", DRIVER_JUDGE_SLEEP_S="0"))
    assert final.returncode == 0 and final.stdout.rstrip().endswith("done"), final.stderr
    seen.update(committed(final.stdout.splitlines()))
    state = check_ledger(path, seen, "after the last resume")
    attempts = state["attempts"]
    assert [a["config"] for a in attempts] == [{"I": i} for i in range(CONFIGS)]  # each once, none lost
    assert sorted(seen) == list(range(1, CONFIGS + 1))
    assert state["run"]["status"] == "done" and state["run"]["attempts"] == CONFIGS
    backups = list_backups(path)
    assert 1 <= len(backups) <= 5 and all(examine_whole(b) for b in backups)


def examine_whole(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


# -- killing the real `ratchet run` ---------------------------------------------------------------------


def has_run(path: Path) -> bool:
    if not path.exists():
        return False
    with Ledger(path) as led:
        return bool(led.list_runs())


def ledger_state(path: Path) -> tuple[dict, list[tuple]]:
    with Ledger(path) as led:
        (run,) = led.list_runs()
        rows = [(a["seq"], a["source_sha256"], json.dumps(a["config"], sort_keys=True), a["verdict"], a["kept"])
                for a in led.attempts(run["id"])]
    return run, rows


@pytest.mark.slow
def test_sigkill_of_ratchet_run_at_four_moments_then_resume(tmp_path):
    """The real command, killed while starting, inside the write of an attempt (twice) and while judging."""
    ledger = tmp_path / "ledger.sqlite"
    budget = 5  # of the tunable seed's 8 configs: enough to kill the run at four moments and finish it
    rng = random.Random(11)
    before: list[tuple] = []
    for moment in ("startup", "in-write record_attempt", "judging", "in-write record_attempt"):
        run_id = ledger_state(ledger)[0]["id"] if has_run(ledger) else None
        args = ["run", "--resume", run_id] if run_id else \
            ["run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", str(budget), "--sampler", "random"]
        env = dict(os.environ, RATCHET_LEDGER=str(ledger),
                   DRIVER_WRITE_SLEEP_S="1.0" if moment.startswith("in-write") else "0")
        proc = subprocess.Popen([sys.executable, DRIVER, "cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp_path)
        lines = Lines(proc)
        try:
            if moment == "startup":
                time.sleep(rng.uniform(0.5, 3.0))
            elif moment == "judging":  # after an attempt is in, somewhere in the next evaluation
                assert lines.wait_for(lambda s: s.startswith("in-write record_attempt"), timeout=300), lines.lines[-5:]
                time.sleep(rng.uniform(0.3, 1.5))
            else:
                assert lines.wait_for(lambda s: s.startswith(moment), timeout=300), lines.lines[-5:]
        finally:
            kill(proc)
        output = "\n".join(lines.drain())
        assert "Traceback" not in output and "attempt budget spent" not in output, output[-2000:]
        if not has_run(ledger):
            continue  # killed before the run was created: the next start makes it
        run, rows = ledger_state(ledger)
        assert run["status"] == GONE, moment
        assert rows[:len(before)] == before, f"{moment}: recorded attempts lost or changed"
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
        before = rows
    assert list_backups(ledger), "a resume backs the ledger up first"
    done = subprocess.run([sys.executable, "-m", "ratchet", "run", "--resume", run["id"]], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, RATCHET_LEDGER=str(ledger)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    run, rows = ledger_state(ledger)
    assert rows[:len(before)] == before and len(rows) == budget
    assert [r[0] for r in rows] == list(range(1, budget + 1))
    # Verdicts are the judge's (a busy machine may fail one on its clock check); each config once.
    assert len({(r[1], r[2]) for r in rows}) == budget and sum(r[3] == "pass" for r in rows) >= 1
    assert run["status"] == "done" and sum(r[4] for r in rows) >= 1
