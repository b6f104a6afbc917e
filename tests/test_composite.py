"""Per-shape winners: when two honest attempts win on different shapes, the run builds a composite that
sends each shape range to its winner, judges it (held-out shapes included), keeps it by the keep rule,
and `ratchet best -o` writes it as one standalone file that `ratchet eval` passes."""

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from ratchet.cli import main
from ratchet.run import composite
from ratchet.run.ledger import Ledger
from ratchet.task import load_task

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "tasks" / "sleepy_axpby.py")
SLEEPY = DATA / "candidates" / "sleepy"


def test_shape_keys_are_read_from_the_arguments():
    assert composite.key_readers(load_task(str(DATA / "tasks" / "axpby.py"))) == ({"N": (0, 0, 1)}, 0)
    assert composite.key_readers(load_task("rmsnorm")) == ({"T": (0, 0, 1), "H": (0, 1, 1)}, 0)
    readers, _ = composite.key_readers(load_task("silu_mul"))  # x is [T, 2I]: I is half a dimension
    assert readers["I"][2] == 2 and readers["T"] == (0, 0, 1)


def attempt(id_, seq, value, config=None):
    source = ("import torch\n\n\ndef kernel(x, y, a, SCALE=1.0):\n"
              f"    return torch.full_like(x, {value}) * SCALE\n")
    return {"id": id_, "seq": seq, "config": config or {}, "source": source}


def test_the_composite_sends_each_call_to_the_nearest_public_shape_and_bakes_configs():
    routes = [composite.Route({"N": 1000}, "float32", attempt(7, 1, 1.0)),
              composite.Route({"N": 8192}, "float32", attempt(9, 2, 2.0, {"SCALE": 3.0}))]
    source = composite.composite_source("rtest", routes, {"N": (0, 0, 1)}, 0)
    namespace = {}
    exec(compile(source, "composite.py", "exec"), namespace)
    kernel = namespace["kernel"]
    for n, expected in ((1000, 1.0), (1500, 1.0), (100, 1.0), (6000, 6.0), (8192, 6.0), (20000, 6.0)):
        x = torch.zeros(n)
        assert torch.equal(kernel(x, x, 1.0), torch.full((n,), expected)), n
    assert "attempts 1, 2" in source.splitlines()[0]


def winners_rows(*medians):
    rows = []
    for n, median in zip((1000, 8192), medians):
        rows.append({"shape": {"N": n}, "dtype": "float32", "held_out": False, "weight": 1.0,
                     "times_us": [median * (1 + 0.001 * i) for i in range(16)], "ref_times_us": [100.0] * 16})
    return rows


def test_winners_need_a_shape_won_beyond_noise():
    def row(id_, *medians, proposer="tune"):
        return {"id": id_, "seq": id_, "verdict": "pass", "proposer": proposer, "extra": {}, "source": "def kernel(): ...",
                "shapes": winners_rows(*medians), "config": {}}

    best = row(1, 10.0, 100.0)
    rival = row(2, 50.0, 20.0)  # slower at the small shape, faster at the large
    routes = composite.winners([best, rival], best)
    assert [(r.shape["N"], r.attempt["id"]) for r in routes] == [(1000, 1), (8192, 2)]
    assert composite.winners([best, row(3, 50.0, 99.5)], best) is None  # within noise at the large shape
    assert composite.winners([best, row(4, 50.0, 20.0, proposer="composite")], best) is None  # never a parent


@pytest.mark.slow
def test_a_run_builds_judges_and_keeps_the_composite_and_best_writes_it(tmp_path, capsys, monkeypatch):
    # The best sleeps 10 ms at both shapes; the rival 20 ms at the small one and 5 ms at the large (the
    # heavy one, so it is not raced), so it is not kept, and the composite runs the best at the small
    # shape. There the composite ties the best by construction; it sleeps as long as the reference, so a
    # loaded machine's longer sleeps move both alike and the tie stays within noise.
    ledger_path = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("RATCHET_LEDGER", str(ledger_path))
    code = main(["run", TASK, "--seed", str(SLEEPY / "even.py"), "--seed", str(SLEEPY / "slow_small.py"),
                 "--device", "cpu"])
    capsys.readouterr()
    assert code == 0
    with Ledger(ledger_path) as ledger:
        (run,) = ledger.list_runs()
        attempts = ledger.attempts(run["id"])
        best = ledger.best(run["id"])
    assert [(a["seq"], a["proposer"], a["verdict"]) for a in attempts] == [
        (1, "tune", "pass"), (2, "tune", "pass"), (3, "composite", "pass")]
    first, second, made = attempts
    assert (first["kept"], second["kept"], made["kept"]) == (1, 0, 1), [a["keep_reason"] for a in attempts]
    assert second["keep_reason"].startswith("shape {'N': 1000} float32 is ")  # slower there: not kept
    assert best["id"] == made["id"]
    assert made["parent_attempt"] == first["id"]
    assert made["extra"]["composite"]["parents"] == [first["id"], second["id"]]
    assert [(r["shape"], r["attempt_seq"]) for r in made["extra"]["composite"]["routes"]] == [
        ({"N": 1000}, 1), ({"N": 8192}, 2)]
    assert any(r["held_out"] for r in made["shapes"])  # judged as any candidate, held-out shapes included
    assert made["idea"] == "composite: attempt 1 at N=1000; attempt 2 at N=8192"

    out_file = tmp_path / "best.py"
    assert main(["best", run["id"], "-o", str(out_file)]) == 0
    text = out_file.read_text()
    assert first["source"] in eval(text.split("_PARTS = ", 1)[1].split("\n]\n", 1)[0] + "]")[0][2]
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # standalone: nothing of the run's folders is needed
    code = main(["eval", TASK, str(out_file), "--device", "cpu", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0 and verdict["verdict"] == "pass", verdict["reasons"]
    with sqlite3.connect(ledger_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
