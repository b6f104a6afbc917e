"""`ratchet doctor` and the ledger's bad days: a full disk, a read-only or a damaged ledger get one line
on stderr and a non-zero exit, never a traceback, through every command that opens the ledger; the
doctor finds and repairs what can be repaired, and restores a damaged file from its backup."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.cli import main
from ratchet.run import ledger as ledger_mod
from ratchet.run.doctor import examine
from ratchet.run.ledger import GONE, Ledger, LedgerError, list_backups
from ratchet.run.liveness import Owner, this_process

HERE = Path(__file__).parent
TASK = str(HERE / "data" / "tasks" / "axpby.py")
TUNABLE = str(HERE / "data" / "candidates" / "axpby_tunable.py")
SOURCE = "def kernel(x, y, a, I=0):\n    return a * x + y\n"


def verdict(speedup: float | None, ok: bool = True) -> dict:
    if not ok:
        return {"verdict": "fail", "reasons": [{"code": "wrong_output", "detail": "x"}], "speedup": None,
                "shapes": [], "judge_wall_s": 1.0}
    return {"verdict": "pass", "reasons": [], "speedup": speedup, "judge_wall_s": 1.0,
            "shapes": [{"shape": {"N": 10}, "dtype": "float32", "times_us": [1.0 / speedup] * 3, "ref_times_us": [1.0] * 3}]}


def make_ledger(path: Path, owner: Owner | None = None) -> tuple[str, list[int]]:
    """A run of three attempts (pass kept, fail, pass) owned by ``owner``."""
    with Ledger(path) as led:
        run = led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="test cpu", proposer="tune",
                             owner=owner)
        ids = [led.record_attempt(run, "c.py", SOURCE, {"I": 0}, verdict(1.5), "tune", keep=True),
               led.record_attempt(run, "c.py", SOURCE, {"I": 1}, verdict(None, ok=False), "tune"),
               led.record_attempt(run, "c.py", SOURCE, {"I": 2}, verdict(1.2), "tune")]
        led.set_status(run, "done", "attempt budget spent")
    return run, ids


def dead_owner() -> Owner:
    """The owner a SIGKILLed `ratchet run` leaves behind: a process of this host that is gone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    import psutil

    started = psutil.Process(proc.pid).create_time()
    proc.wait()
    return Owner(pid=proc.pid, host=this_process().host, started=started)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("ratchet: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and all(n in err for n in needles), err


# -- liveness ------------------------------------------------------------------------------------------


def test_a_run_whose_process_is_gone_reads_gone_and_doctor_stores_stopped(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite"
    run, _ = make_ledger(path)
    with Ledger(path) as led:
        live = led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="c", proposer="tune",
                              owner=this_process())
        gone = led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="c", proposer="tune",
                              owner=dead_owner())
        elsewhere = led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="c", proposer="tune",
                                   owner=Owner(pid=1, host="another-host", started=0.0))
        reused = led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="c", proposer="tune",
                                owner=Owner(pid=os.getpid(), host=this_process().host, started=12.0))  # pid reused
    code, out, _ = run_cli(["runs", "--json", "--ledger", str(path)], capsys)
    statuses = {r["id"]: r["status"] for r in json.loads(out)}
    assert code == 0 and statuses == {run: "done", live: "running", gone: GONE, elsewhere: "running", reused: GONE}
    code, out, _ = run_cli(["runs", "--ledger", str(path)], capsys)
    assert [line.split()[2] for line in out.splitlines()] == ["done", "running", GONE, "running", GONE]
    code, out, _ = run_cli(["show", gone, "--json", "--ledger", str(path)], capsys)
    assert json.loads(out)["run"]["status"] == GONE

    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    assert code == 0, out
    assert sum("is gone: marked stopped" in line for line in out.splitlines()) == 2 and "repaired" in out.splitlines()[-1]
    with Ledger(path) as led:
        assert led.get_run(gone)["status"] == "stopped" and "process gone" in led.get_run(gone)["stop_reason"]
        assert led.get_run(live)["status"] == "running"
        # Resuming is refused while the owner lives, allowed once it is gone.
        with pytest.raises(LedgerError, match="still running in process"):
            led.claim_run(live, dead_owner())
        led.claim_run(gone, this_process())
        assert led.get_run(gone)["owner_pid"] == os.getpid()
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    assert code == 0 and out.splitlines()[-1].endswith("healthy")


# -- repairs -------------------------------------------------------------------------------------------


def test_doctor_repairs_best_pointers_orphans_and_reports_what_it_cannot(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite"
    run, (kept, failed, later) = make_ledger(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("INSERT INTO best (run_id, attempt_id, since_seq, created_at) VALUES (?, ?, 2, 'x')", (run, failed))
    conn.execute("INSERT INTO best (run_id, attempt_id, since_seq, created_at) VALUES (?, 999, 3, 'x')", (run,))
    conn.execute("UPDATE attempts SET kept = 1 WHERE id = ?", (later,))  # kept, yet never the best
    conn.execute("UPDATE attempts SET parent_attempt = 4242 WHERE id = ?", (later,))
    conn.commit()
    conn.close()
    with Ledger(path) as led:
        assert led.best(run)["verdict"] == "fail"  # the pointers now make a failed attempt the best
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    lines = out.splitlines()
    assert code == 0, out
    assert any(line.startswith("repaired") and "best pointer(s) to missing attempt_id" in line for line in lines)
    assert any(f"run {run}: removed 1 best pointer(s) to non-passing" in line and "best is now attempt 1 (1.500x)"
               in line for line in lines), out
    assert any("cleared parent_attempt of 1 attempt(s)" in line for line in lines)
    assert any("kept marks of 1 attempt(s)" in line for line in lines)
    with Ledger(path) as led:
        assert led.best(run)["id"] == kept and [h["attempt_id"] for h in led.best_history(run)] == [kept]
        assert [a["kept"] for a in led.attempts(run)] == [1, 0, 0]
        assert led.get_attempt(later)["parent_attempt"] is None
    assert main(["doctor", "--ledger", str(path)]) == 0 and capsys.readouterr().out.splitlines()[-1].endswith("healthy")

    # A gap in seq (a row deleted by hand) cannot be repaired without rewriting history: exit 1.
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM attempts WHERE id = ?", (failed,))
    conn.commit()
    conn.close()
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    assert code == 1 and any(line.startswith("problem") and "numbered 1..3, not 1..2" in line for line in out.splitlines())
    assert "1 problem(s) remain" in out.splitlines()[-1]


def test_doctor_migrates_an_old_schema_and_refuses_foreign_or_newer_files(tmp_path, capsys, monkeypatch):
    old = tmp_path / "old.sqlite"
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", ledger_mod.MIGRATIONS[:2])
    Ledger(old).close()
    monkeypatch.undo()
    code, out, _ = run_cli(["doctor", "--ledger", str(old)], capsys)
    assert code == 0 and "schema migrated from version 2 to 4" in out
    newer = tmp_path / "newer.sqlite"
    make_ledger(newer)
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = newer.read_bytes()
    code, out, _ = run_cli(["doctor", "--ledger", str(newer)], capsys)
    assert code == 1 and "written by a newer Ratchet (schema 99" in out and newer.read_bytes() == before
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    code, out, _ = run_cli(["doctor", "--ledger", str(other)], capsys)
    assert code == 1 and "not a Ratchet ledger; left untouched" in out
    code, _, err = run_cli(["doctor", "--ledger", str(tmp_path / "none.sqlite")], capsys)
    assert_one_line(code, err, "no ledger at", "no backup")
    code, _, err = run_cli(["doctor", "--ledger", str(tmp_path)], capsys)
    assert_one_line(code, err, "is a directory")
    code, _, err = run_cli(["doctor", "--ledger"], capsys)
    assert_one_line(code, err, "expected one argument")


# -- backups and damaged files ---------------------------------------------------------------------------


def damage_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"\x00" * 100)  # what a hostile candidate did to a ledger: the SQLite header is gone


def test_backups_are_whole_kept_few_and_restore_a_damaged_ledger(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite"
    run, _ = make_ledger(path)
    with Ledger(path) as led:
        made = [led.backup() for _ in range(7)]
    backups = list_backups(path)
    assert backups == sorted(made[-5:], reverse=True) and backups[0].parent == tmp_path / "backups"
    assert not list((tmp_path / "backups").glob(".*"))  # no partial copy left
    for b in backups:
        conn = sqlite3.connect(f"file:{b}?mode=ro", uri=True)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 3
        conn.close()
    with Ledger(path) as led:  # the tail after the backup: lost by a restore, and said so
        led.create_run(task="axpby", task_path=TASK, device="cpu", device_name="c", proposer="tune")
    damage_header(path)
    for args in (["runs"], ["runs", "--json"], ["show", run], ["best", run, "-o", str(tmp_path / "b.py")],
                 ["idea", "list"], ["idea", "add", TASK, "fuse it"], ["run", "--resume", run]):
        code, out, err = run_cli(args + ["--ledger", str(path)], capsys)
        assert_one_line(code, err, "not a SQLite database", "ratchet doctor")
        assert out == ""
    damaged = path.read_bytes()
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    lines = out.splitlines()
    assert code == 0, out
    assert lines[0] == "found    the file is damaged: file is not a database"
    assert lines[1].startswith(f"repaired restored from the backup {backups[0].name}: 1 run(s), 3 attempt(s)")
    kept_as = next(tmp_path.glob("ledger.sqlite.damaged-*"))
    assert kept_as.read_bytes() == damaged  # the damaged file is kept, never deleted
    with Ledger(path) as led:
        assert [r["id"] for r in led.list_runs()] == [run] and len(led.attempts(run)) == 3

    # A ledger deleted by mistake comes back from its backup too; a damaged one with no whole backup stays.
    path.unlink()
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    assert code == 0 and out.splitlines()[0] == f"found    no ledger at {path}"
    shutil.rmtree(tmp_path / "backups")
    damage_header(path)
    code, out, _ = run_cli(["doctor", "--ledger", str(path)], capsys)
    assert code == 1 and "cannot restore the ledger: no backup of it" in out


def test_a_run_start_backs_the_ledger_up(tmp_path):
    path = tmp_path / "ledger.sqlite"
    run, _ = make_ledger(path)
    env = dict(os.environ, RATCHET_LEDGER=str(path))
    proc = subprocess.run([sys.executable, "-m", "ratchet", "run", TASK, "--seed", TUNABLE, "--device", "cpu",
                           "--budget", "1"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (backup,) = list_backups(path)
    conn = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    assert [r[0] for r in conn.execute("SELECT id FROM runs")] == [run]  # taken before the new run was created
    conn.close()
    with Ledger(path) as led:
        runs = led.list_runs()
        assert len(runs) == 2 and runs[1]["status"] == "done" and runs[1]["owner_pid"] not in (None, os.getpid())


# -- full disk, read-only --------------------------------------------------------------------------------


class FullDisk:
    """A connection whose writes fail as SQLite's do on a full disk."""

    def __init__(self, conn):
        object.__setattr__(self, "_conn", conn)

    def __setattr__(self, name, value):  # row_factory and the like belong to the real connection
        setattr(self._conn, name, value)

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_full_disk_is_one_line_and_records_nothing_half(tmp_path, capsys, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    run, _ = make_ledger(path)
    real_connect = sqlite3.connect
    monkeypatch.setattr(ledger_mod.sqlite3, "connect", lambda target, *a, **k: (
        FullDisk if Path(target) == path else (lambda c: c))(real_connect(target, *a, **k)))
    for args in (["idea", "add", TASK, "fuse it"], ["run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1"]):
        code, _, err = run_cli(args + ["--ledger", str(path)], capsys)
        assert_one_line(code, err, "the disk is full", "database or disk is full")
    code, out, _ = run_cli(["runs", "--json", "--ledger", str(path)], capsys)  # reading still works
    assert code == 0 and [r["id"] for r in json.loads(out)] == [run]
    monkeypatch.undo()
    with Ledger(path) as led:
        assert [r["id"] for r in led.list_runs()] == [run] and led.ideas() == []


RLIMITED = """
import glob, os, resource, signal, sys
from ratchet.run.ledger import Ledger
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
record = Ledger.record_attempt

def record_then_limit(self, *args, **kwargs):  # from the first attempt on, no file may grow: a full disk
    attempt = record(self, *args, **kwargs)
    size = max(os.path.getsize(p) for p in glob.glob(os.environ["RATCHET_LEDGER"] + "*"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return attempt

Ledger.record_attempt = record_then_limit
from ratchet.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_file_size_limit_mid_run_is_one_line_and_resume_finishes(tmp_path):
    """The real `ratchet run` with no file allowed to grow after its first attempt (RLIMIT_FSIZE), then
    resumed without the limit."""
    path = tmp_path / "ledger.sqlite"
    env = dict(os.environ, RATCHET_LEDGER=str(path))
    proc = subprocess.run([sys.executable, "-c", RLIMITED, "run", TASK, "--seed", TUNABLE,
                           "--device", "cpu", "--budget", "4", "--sampler", "grid"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("ratchet: error: the ledger") and "disk" in proc.stderr
    with Ledger(path) as led:
        (run,) = led.list_runs()
        recorded = led.attempts(run["id"])
        assert run["status"] in ("failed", GONE) and len(recorded) == 1  # the limit ended it at the second
        assert [a["seq"] for a in recorded] == list(range(1, len(recorded) + 1))
    done = subprocess.run([sys.executable, "-m", "ratchet", "run", "--resume", run["id"]], capture_output=True,
                          text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    with Ledger(path) as led:
        after = led.attempts(run["id"])
        assert after[:len(recorded)] == recorded and len(after) == 4
        assert len({json.dumps(a["config"], sort_keys=True) for a in after}) == 4


def unprivileged() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them): a user namespace."""
    if os.geteuid() != 0:
        return []
    probe = subprocess.run(["unshare", "-U", "--map-user=1000", "--map-group=1000", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("running as root without user namespaces: permissions cannot be tested")
    return ["unshare", "-U", "--map-user=1000", "--map-group=1000"]


def test_read_only_ledger_reads_and_refuses_writes_in_one_line(tmp_path):
    path = tmp_path / "ledger.sqlite"
    run, _ = make_ledger(path)
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = path.read_bytes()
    prefix = unprivileged()
    env = dict(os.environ, RATCHET_LEDGER=str(path))

    def ratchet(*args):
        return subprocess.run([*prefix, sys.executable, "-m", "ratchet", *args], capture_output=True, text=True,
                              timeout=600, env=env, cwd=tmp_path)

    listed = ratchet("runs", "--json")
    assert listed.returncode == 0 and [r["id"] for r in json.loads(listed.stdout)] == [run], listed.stderr
    for args in (("idea", "add", TASK, "fuse it"), ("run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1")):
        proc = ratchet(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("ratchet: error: the ledger") and "read-only" in proc.stderr, proc.stderr
    assert path.read_bytes() == before
    # A folder the ledger cannot be created in.
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    proc = subprocess.run([*prefix, sys.executable, "-m", "ratchet", "idea", "add", TASK, "x", "--ledger",
                           str(folder / "ledger.sqlite")], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "ledger" in proc.stderr
