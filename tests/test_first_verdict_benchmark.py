"""benchmarks/probes/first_verdict.py: each attempt's verdict and the seconds from its run's start to its
record, read from a ledger; bad input is one line and exit 2."""

from datetime import datetime

from benchmarks.probes import first_verdict
from ratchet.run.ledger import Ledger

PASS = {"verdict": "pass", "reasons": [], "speedup": 1.2, "shapes": [], "judge_wall_s": 12.5}
FAIL = {"verdict": "fail", "reasons": [{"code": "wrong_output", "detail": "x"}], "shapes": [], "judge_wall_s": 3.0}


def test_the_attempts_in_the_order_recorded_with_seconds_from_the_run_start(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.create_run(task="rmsnorm", task_path="rmsnorm", device="cpu", device_name="cpu", proposer="tune")
        run = ledger.create_run(task="softmax", task_path="softmax", device="cpu", device_name="cpu", proposer="tune")
        ledger.record_attempt(run, "/x/wrong.py", "def kernel(x):\n    return x\n", {}, FAIL, "tune")
        ledger.record_attempt(run, "/x/good.py", "def kernel(x):\n    return x.softmax(-1)\n", {}, PASS, "tune")
        start = datetime.fromisoformat(ledger.get_run(run)["created_at"])
        recorded = [(datetime.fromisoformat(a["created_at"]) - start).total_seconds() for a in ledger.attempts(run)]
        found = first_verdict.rows(ledger, run)
    assert [(r["seq"], r["file"], r["verdict"], r["judge_s"]) for r in found] == [(1, "wrong.py", "fail", 3.0),
                                                                                  (2, "good.py", "pass", 12.5)]
    assert [r["recorded_s"] for r in found] == recorded and 0 <= recorded[0] <= recorded[1]
    out = tmp_path / "fv.md"
    assert first_verdict.main(["--ledger", str(path), "--out", str(out)]) == 0  # the newest run by default
    text = capsys.readouterr().out
    assert "| 1 | wrong.py | fail | 3.0 |" in text and "| 2 | good.py | pass | 12.5 |" in text
    assert f"first verdict: {recorded[0]:.1f} s after the run started" in text and out.read_text() == text


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert first_verdict.main(["--ledger", str(tmp_path / "none.sqlite")]) == 2
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a ledger\n")
    assert first_verdict.main(["--ledger", str(bad)]) == 2
    empty = tmp_path / "empty.sqlite"
    Ledger(empty).close()
    assert first_verdict.main(["--ledger", str(empty)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("first_verdict: ") for line in err)
    assert "holds no run" in err[2]
