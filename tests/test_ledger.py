"""The ledger: exact round trips, seq and best history, schema versions, WAL readers, SIGKILL."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from ratchet.run import ledger as ledger_mod
from ratchet.judge.verdict import Reason, ShapeResult, Verdict
from ratchet.run.ledger import Ledger, LedgerError, default_ledger_path, source_sha256, write_standalone
from seed_files import import_file

SOURCE = "def kernel(x, BLOCK=128):\n    return x\n"


def make_verdict(verdict="pass", speedup=1.5, reasons=(), times=(10.0, 10.5, 9.75)) -> dict:
    shapes = [
        ShapeResult(shape={"T": 7, "H": 4096}, dtype="bfloat16", held_out=False, mode="eager", median_us=10.0,
                    ref_median_us=15.0, speedup=speedup, times_us=list(times), ref_times_us=[15.0, 15.25]),
        ShapeResult(shape={"T": 1, "H": 8191}, dtype="float32", held_out=True, correct=True, weight=0.5,
                    times_us=[1.0 / 3.0]),
    ]
    return Verdict(verdict=verdict, reasons=list(reasons), speedup=speedup, shapes=shapes, task="rmsnorm",
                   candidate="c.py", config={"BLOCK": 256}, device="cpu", device_name="test cpu",
                   judge_wall_s=2.25, notes=["a note"]).to_json(with_times=True)


def new_run(led: Ledger, **kw) -> str:
    args = dict(task="rmsnorm", task_path="/tasks/rmsnorm/task.py", device="cpu", device_name="test cpu",
                proposer="tune")
    args.update(kw)
    return led.create_run(**args)


def sha_file(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def led(tmp_path):
    with Ledger(tmp_path / "l" / "ledger.sqlite") as led:
        yield led


def test_default_path(tmp_path, monkeypatch):
    monkeypatch.delenv("RATCHET_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_ledger_path(None) == tmp_path / ".ratchet" / "ledger.sqlite"
    monkeypatch.setenv("RATCHET_LEDGER", str(tmp_path / "env.sqlite"))
    assert default_ledger_path(None) == tmp_path / "env.sqlite"
    assert default_ledger_path("x/y.sqlite").as_posix() == "x/y.sqlite"
    Ledger(default_ledger_path(None)).close()
    assert (tmp_path / "env.sqlite").is_file()


def test_open_settings(led):
    conn = led._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
    assert led.schema_version == len(ledger_mod.MIGRATIONS) == 4


def test_create_get_list(led):
    assert led.list_runs() == []
    a = new_run(led, goal_speedup=3.0, budget_attempts=50, budget_seconds=600.0, options={"seed": 7})
    b = new_run(led, task="softmax", proposer="llm")
    assert a != b and a.startswith("r") and len(a) == 9 and int(a[1:], 16) >= 0
    run = led.get_run(a)
    assert run["task"] == "rmsnorm" and run["task_path"] == "/tasks/rmsnorm/task.py"
    assert (run["device"], run["device_name"], run["proposer"]) == ("cpu", "test cpu", "tune")
    assert (run["goal_speedup"], run["budget_attempts"], run["budget_seconds"]) == (3.0, 50, 600.0)
    assert run["options"] == {"seed": 7} and run["status"] == "running"
    assert run["attempts"] == 0 and run["best_speedup"] is None and run["finished_at"] is None
    runs = led.list_runs()
    assert [r["id"] for r in runs] == [a, b]
    for r in runs:
        assert {"id", "task", "status", "attempts", "best_speedup", "device", "created_at", "proposer"} <= set(r)
    json.dumps(runs)  # `ratchet runs --json` prints these as they are


def test_set_status(led):
    run = new_run(led)
    led.set_status(run, "stopped", "budget: 50 attempts")
    got = led.get_run(run)
    assert got["status"] == "stopped" and got["stop_reason"] == "budget: 50 attempts" and got["finished_at"]
    led.set_status(run, "running")  # resume
    assert led.get_run(run)["finished_at"] is None
    with pytest.raises(LedgerError, match="unknown run status 'paused'"):
        led.set_status(run, "paused")


def test_unknown_run(led):
    for call in (led.get_run, led.attempts, led.best, led.best_history, lambda r: led.set_status(r, "done")):
        with pytest.raises(LedgerError) as info:
            call("rdeadbeef")
        assert str(info.value) == "unknown run 'rdeadbeef' (see 'ratchet runs')"
    with pytest.raises(LedgerError, match="unknown run 'rnope'"):
        led.record_attempt("rnope", "c.py", SOURCE, {}, make_verdict(), "tune")


def test_attempt_round_trip(led):
    run = new_run(led)
    verdict = make_verdict(
        "fail", speedup=None, reasons=[Reason("wrong_output", "max abs err 0.5 at [3, 17]")].copy()
    )
    aid = led.record_attempt(run, "/c/cand.py", SOURCE, {"BLOCK": 256, "A": [1, 2]}, verdict, "llm",
                             idea="fuse the two passes", cost={"tokens_in": 1200, "usd": 0.0125})
    (att,) = led.attempts(run)
    assert att["id"] == aid and att["seq"] == 1 and att["run_id"] == run
    assert att["candidate_path"] == "/c/cand.py" and att["source"] == SOURCE
    assert att["source_sha256"] == source_sha256(SOURCE) == hashlib.sha256(SOURCE.encode()).hexdigest()
    assert att["config"] == {"BLOCK": 256, "A": [1, 2]} and att["config_key"] == '{"A":[1,2],"BLOCK":256}'
    assert att["verdict"] == "fail" and att["speedup"] is None
    assert att["reasons"] == [{"code": "wrong_output", "detail": "max abs err 0.5 at [3, 17]"}]
    assert att["shapes"] == verdict["shapes"]  # every field, times lists included, floats exact
    assert att["shapes"][0]["times_us"] == [10.0, 10.5, 9.75] and att["shapes"][1]["times_us"] == [1.0 / 3.0]
    assert att["judge_wall_s"] == 2.25 and att["proposer"] == "llm" and att["idea"] == "fuse the two passes"
    assert att["cost"] == {"tokens_in": 1200, "usd": 0.0125} and att["kept"] == 0 and att["parent_attempt"] is None
    assert att["extra"]["notes"] == ["a note"] and att["extra"]["device_name"] == "test cpu"
    assert led.get_attempt(aid) == att

    passing = make_verdict("pass", speedup=1.8125)
    child = led.record_attempt(run, "/c/cand.py", SOURCE, {"BLOCK": 512}, passing, "tune", parent_attempt=aid)
    att2 = led.get_attempt(child)
    assert att2["speedup"] == 1.8125 and att2["parent_attempt"] == aid and att2["cost"] is None
    assert att2["reasons"] == []
    assert led.get_run(run)["attempts"] == 2


def test_seq_and_duplicates(led):
    run, other = new_run(led), new_run(led)
    for i in range(5):
        led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 2**i}, make_verdict(), "tune")
    assert [a["seq"] for a in led.attempts(run)] == [1, 2, 3, 4, 5]
    assert led.has_attempt(run, source_sha256(SOURCE), {"BLOCK": 4})
    assert not led.has_attempt(run, source_sha256(SOURCE), {"BLOCK": 3})
    assert not led.has_attempt(other, source_sha256(SOURCE), {"BLOCK": 4})
    with pytest.raises(LedgerError, match="already has an attempt with this source"):
        led.record_attempt(run, "elsewhere.py", SOURCE, {"BLOCK": 4}, make_verdict("error"), "llm")
    # the failed insert used no seq; another source with the same config, or another run, is fine
    led.record_attempt(run, "c.py", SOURCE + "# v2\n", {"BLOCK": 4}, make_verdict(), "tune")
    led.record_attempt(other, "c.py", SOURCE, {"BLOCK": 4}, make_verdict(), "tune")
    assert [a["seq"] for a in led.attempts(run)] == [1, 2, 3, 4, 5, 6]
    assert [a["seq"] for a in led.attempts(other)] == [1]
    with pytest.raises(LedgerError, match="verdict must be one of"):
        led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 99}, {"verdict": "maybe"}, "tune")


def test_best_history(led):
    run = new_run(led)
    ids = [led.record_attempt(run, "c.py", SOURCE, {"BLOCK": b}, make_verdict(speedup=s), "tune")
           for b, s in [(64, 1.1), (128, 1.4), (256, 1.2), (512, 2.0)]]
    assert led.best(run) is None
    led.set_best(run, ids[0])
    led.set_best(run, ids[1])
    led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 1024}, make_verdict(speedup=0.5), "tune")
    led.set_best(run, ids[3])
    best = led.best(run)
    assert best["id"] == ids[3] and best["speedup"] == 2.0 and best["config"] == {"BLOCK": 512} and best["kept"] == 1
    hist = led.best_history(run)
    assert [h["attempt_id"] for h in hist] == [ids[0], ids[1], ids[3]]
    assert [h["speedup"] for h in hist] == [1.1, 1.4, 2.0]
    assert [h["since_seq"] for h in hist] == [4, 4, 5]
    assert [a["kept"] for a in led.attempts(run)] == [1, 1, 0, 1, 0]
    assert led.get_run(run)["best_speedup"] == 2.0 and led.get_run(run)["best_seq"] == 4
    failing = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 7}, make_verdict("fail"), "tune")
    with pytest.raises(LedgerError, match="did not pass"):
        led.set_best(run, failing)
    with pytest.raises(LedgerError, match="has no attempt"):
        led.set_best(new_run(led), ids[0])
    assert len(led.best_history(run)) == 3  # refused calls wrote nothing


# -- schema versions and bad files --------------------------------------------------------------------


def test_newer_schema_refused_without_touching_the_file(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        new_run(led)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    before = sha_file(path)
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert f"was written by a newer Ratchet (schema 7, this one knows {len(ledger_mod.MIGRATIONS)})" in str(info.value)
    assert "\n" not in str(info.value)
    assert sha_file(path) == before


def test_not_a_database(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 50)
    before = sha_file(path)
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert "is not a Ratchet ledger: not a SQLite database" in str(info.value) and "\n" not in str(info.value)
    assert sha_file(path) == before

    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="is a SQLite database but not a Ratchet ledger"):
        Ledger(other)
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger(tmp_path / "missing.sqlite", create=False)


V2 = """
ALTER TABLE attempts ADD COLUMN notes TEXT;
CREATE TABLE tags (run_id TEXT NOT NULL REFERENCES runs(id), tag TEXT NOT NULL);
UPDATE attempts SET notes = 'migrated ' || seq;
"""


def test_migration_keeps_data(tmp_path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        run = new_run(led, options={"k": 1})
        aid = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, make_verdict(speedup=1.25), "tune")
        led.set_best(run, aid)
        before = led.attempts(run)
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", ledger_mod.MIGRATIONS + [V2])
    with Ledger(path) as led:
        assert led.schema_version == len(ledger_mod.MIGRATIONS)
        after = led.attempts(run)
        assert [a.pop("notes") for a in after] == ["migrated 1"]
        assert after == before
        assert led.best(run)["id"] == aid and led.get_run(run)["options"] == {"k": 1}
        led._conn.execute("INSERT INTO tags VALUES (?, 'x')", (run,))
        led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 512}, make_verdict(), "tune")  # v1 API still works
        assert [a["seq"] for a in led.attempts(run)] == [1, 2]


def test_failed_migration_rolls_back(tmp_path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        run = new_run(led)
    broken = "CREATE TABLE half (x);\nALTER TABLE no_such_table ADD COLUMN y;\n"
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", ledger_mod.MIGRATIONS + [broken])
    with pytest.raises(LedgerError, match="no such table: no_such_table"):  # one line, not a traceback
        Ledger(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(ledger_mod.MIGRATIONS) - 1
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0
    conn.close()
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", ledger_mod.MIGRATIONS[:-1])
    with Ledger(path) as led:
        assert led.get_run(run)["id"] == run


# -- concurrency and durability -----------------------------------------------------------------------


def test_reader_during_a_write_transaction(tmp_path):
    path = tmp_path / "ledger.sqlite"
    writer = Ledger(path)
    run = new_run(writer)
    writer.record_attempt(run, "c.py", SOURCE, {"BLOCK": 1}, make_verdict(), "tune")
    # The writer holds an open write transaction (as mid-attempt); a reader must open and read at once.
    writer._conn.execute("BEGIN IMMEDIATE")
    writer._conn.execute("UPDATE runs SET status = 'done' WHERE id = ?", (run,))
    start = time.monotonic()
    with Ledger(path) as reader:
        runs = reader.list_runs()
        assert time.monotonic() - start < 2.0  # not waiting out the busy timeout
        assert runs[0]["attempts"] == 1 and runs[0]["status"] == "running"  # committed state only
        writer._conn.execute("COMMIT")
        writer.record_attempt(run, "c.py", SOURCE, {"BLOCK": 2}, make_verdict(), "tune")
        assert reader.get_run(run)["status"] == "done"
        assert [a["seq"] for a in reader.attempts(run)] == [1, 2]
    writer.close()


CHILD = textwrap.dedent(
    """
    import os, sys
    from ratchet.run.ledger import Ledger
    led = Ledger(sys.argv[1])
    run = sys.argv[2]
    shapes = [{"shape": {"T": t, "H": 4096}, "times_us": [float(i) for i in range(200)]} for t in range(8)]
    i = 0
    while True:
        i += 1
        src = "def kernel(x):\\n    return x  # %d %d\\n" % (os.getpid(), i)
        verdict = {"verdict": "pass", "reasons": [], "speedup": 1.0 + i, "shapes": shapes, "judge_wall_s": 0.5}
        aid = led.record_attempt(run, "c.py", src, {"BLOCK": i}, verdict, "tune", idea="x" * 1000)
        seq = led.get_attempt(aid)["seq"]
        if seq % 3 == 0:
            led.set_best(run, aid)
        print(seq, flush=True)
    """
)


def test_sigkill_leaves_whole_attempts(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        run = new_run(led)
    rng = random.Random()
    printed_all: list[int] = []
    for round_ in range(3):
        delay = rng.uniform(0.05, 0.6)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), run], stdout=subprocess.PIPE, text=True)
        try:
            first = child.stdout.readline()  # the child is writing
            assert first.endswith("\n"), f"child died early (rc={child.poll()})"
            time.sleep(delay)
            child.send_signal(signal.SIGKILL)
            rest = child.stdout.read()
        finally:
            child.kill()
            child.wait()
        assert child.returncode == -signal.SIGKILL
        lines = (first + rest).split("\n")[:-1]  # a line cut by the kill has no "\n": not counted
        printed = [int(line) for line in lines]
        printed_all += printed
        with Ledger(path) as led:
            assert led._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert led._conn.execute("PRAGMA foreign_key_check").fetchall() == []
            seqs = [a["seq"] for a in led.attempts(run)]
            note = f"round {round_}, killed after {delay:.3f}s"
            assert seqs == list(range(1, len(seqs) + 1)), note
            assert set(printed_all) <= set(seqs), note
            assert len(seqs) > len(printed_all) - len(printed), note  # this round added attempts
            for att in led.attempts(run):  # every attempt is whole
                assert len(att["shapes"]) == 8 and len(att["idea"]) == 1000 and att["verdict"] == "pass"
            hist = led.best_history(run)
            assert all(h["seq"] % 3 == 0 for h in hist)
            assert led.get_run(run)["attempts"] == len(seqs)


# -- standalone files ---------------------------------------------------------------------------------

TUNABLE = textwrap.dedent(
    """
    SPACE = {"BLOCK": [128, 256], "WARPS": [4, 8]}


    def kernel(x, BLOCK=128, WARPS=4):
        return {"x": x, "BLOCK": BLOCK, "WARPS": WARPS}
    """
)


def test_write_standalone(led, tmp_path):
    run = new_run(led)
    aid = led.record_attempt(run, "t.py", TUNABLE, {"BLOCK": 256, "WARPS": 8}, make_verdict(speedup=1.5), "tune")
    led.set_best(run, aid)
    out = write_standalone(led.best(run), tmp_path / "out" / "best.py")
    text = out.read_text()
    assert text.startswith(TUNABLE) and f"run {run}, attempt 1" in text
    module = import_file(out)
    assert module.kernel(3) == {"x": 3, "BLOCK": 256, "WARPS": 8}
    assert module.kernel(3, WARPS=4) == {"x": 3, "BLOCK": 256, "WARPS": 4}  # an explicit keyword still wins
    assert module.SPACE == {"BLOCK": [256], "WARPS": [8]}

    # no config: the source as it was
    plain = led.record_attempt(run, "p.py", SOURCE, {}, make_verdict(), "tune")
    out2 = write_standalone(led.get_attempt(plain), tmp_path / "plain.py")
    assert out2.read_text().startswith(SOURCE) and import_file(out2).kernel(5) == 5


def test_standalone_space_seen_by_load_candidate(led, tmp_path):
    from ratchet.candidate import load_candidate

    run = new_run(led)
    aid = led.record_attempt(run, "t.py", TUNABLE, {"BLOCK": 256, "WARPS": 8}, make_verdict(), "tune")
    out = write_standalone(led.get_attempt(aid), tmp_path / "best.py")
    # `ratchet eval TASK best.py` must judge the baked config, not SPACE's first values of the original
    assert load_candidate(out).default_config() == {"BLOCK": 256, "WARPS": 8}


V1_ONLY = 1  # a ledger written before ideas existed


def test_v1_ledger_gains_ideas_and_keeps_attempts(tmp_path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", ledger_mod.MIGRATIONS[:V1_ONLY])
    with Ledger(path) as led:
        run = "r0000v1v1"
        led._conn.execute(  # what a v1 Ratchet wrote: no owner columns
            "INSERT INTO runs (id, task, task_path, device, device_name, proposer, status, created_at, updated_at)"
            " VALUES (?, 'rmsnorm', 'p', 'cpu', 'test cpu', 'tune', 'running', 'then', 'then')", (run,))
        led._conn.execute(  # what a v1 Ratchet wrote: no idea_id or token columns yet
            "INSERT INTO attempts (run_id, seq, candidate_path, source, source_sha256, config_json, config_key,"
            " proposer, verdict, reasons_json, speedup, shapes_json, judge_wall_s, created_at)"
            " VALUES (?, 1, 'c.py', ?, ?, '{}', '{}', 'tune', 'pass', '[]', 1.25, '[]', 1.0, 'then')",
            (run, SOURCE, source_sha256(SOURCE)))
        led._conn.commit()
    monkeypatch.undo()
    with Ledger(path) as led:
        assert led.schema_version == len(ledger_mod.MIGRATIONS) == 4
        # No owner was recorded then: whether its process lives cannot be told, so it reads as stored.
        assert led.get_run(run)["status"] == "running" and led.get_run(run)["owner_pid"] is None
        (att,) = led.attempts(run)
        assert att["speedup"] == 1.25 and att["idea_id"] is None and att["tokens_in"] is None
        assert led.ideas() == []


def test_ideas_link_to_attempts_and_report_outcomes(led):
    run = new_run(led)
    first = led.add_idea("rmsnorm", "  split each row across two programs at T=1 ")
    second = led.add_idea("softmax", "one online pass", author="llm")
    assert [i["id"] for i in led.ideas("rmsnorm")] == [first]
    idea = led.get_idea(first)
    assert idea["text"] == "split each row across two programs at T=1" and idea["status"] == "pending"
    assert idea["attempts"] == 0 and idea["best_speedup"] is None and idea["author"] == "human"
    a1 = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, make_verdict(speedup=1.5), "llm", idea_id=first,
                            tokens_in=1200, tokens_out=800, cost_usd=0.0125)
    led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 512}, make_verdict("fail", speedup=None), "llm", idea_id=first)
    led.set_best(run, a1)
    idea = led.get_idea(first)
    assert (idea["status"], idea["attempts"], idea["passed"], idea["kept"], idea["best_speedup"]) == ("tried", 2, 1, 1, 1.5)
    att = led.get_attempt(a1)
    assert (att["idea_id"], att["tokens_in"], att["tokens_out"], att["cost_usd"]) == (first, 1200, 800, 0.0125)
    assert led.get_idea(second)["status"] == "pending" and led.get_idea(second)["author"] == "llm"
    led.set_idea_status(second, "dropped")
    assert led.get_idea(second)["status"] == "dropped"
    with pytest.raises(LedgerError, match="unknown idea 999"):
        led.set_idea_status(999, "tried")
    with pytest.raises(LedgerError, match="needs some text"):
        led.add_idea("rmsnorm", "   ")
