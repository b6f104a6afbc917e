"""`ratchet idea add/list/drop` and ideas in `ratchet show`: values read back, bad input exits 2."""

import json

from ratchet.run.ledger import Ledger
from one_line_refusal import run_cli
from test_ledger import SOURCE, make_verdict, new_run


def test_add_list_drop_and_show(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    code, out, _ = run_cli(capsys, "idea", "add", "rmsnorm", "two rows per program at T=1", "--ledger", ledger, "--json")
    assert code == 0
    idea = json.loads(out)
    assert (idea["task"], idea["text"], idea["status"], idea["attempts"]) == ("rmsnorm", "two rows per program at T=1",
                                                                             "pending", 0)
    run_cli(capsys, "idea", "add", "softmax", "online softmax", "--ledger", ledger)
    with Ledger(ledger) as led:
        run = new_run(led)  # an rmsnorm run
        aid = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, make_verdict(speedup=1.75), "llm",
                                 idea_id=idea["id"])
        led.set_best(run, aid)
    code, out, _ = run_cli(capsys, "idea", "list", "--task", "rmsnorm", "--ledger", ledger, "--json")
    (listed,) = json.loads(out)
    assert (listed["status"], listed["attempts"], listed["passed"], listed["kept"], listed["best_speedup"]) == (
        "tried", 1, 1, 1, 1.75)
    code, out, _ = run_cli(capsys, "show", run, "--ledger", ledger, "--json")
    shown = json.loads(out)
    assert [i["text"] for i in shown["ideas"]] == ["two rows per program at T=1"]
    assert shown["attempts"][0]["idea_id"] == idea["id"]
    code, out, _ = run_cli(capsys, "show", run, "--ledger", ledger)
    assert code == 0 and "two rows per program at T=1" in out and "1 kept, best 1.750x" in out
    assert run_cli(capsys, "idea", "drop", "2", "--ledger", ledger)[0] == 0
    _, out, _ = run_cli(capsys, "idea", "list", "--ledger", ledger, "--json")
    assert [i["status"] for i in json.loads(out)] == ["tried", "dropped"]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    for argv in (("idea", "add", "no_such_task", "x"), ("idea", "add", "rmsnorm", "  "), ("idea", "drop", "7"),
                 ("idea", "drop", "seven"), ("idea", "drop", str(2 ** 63))):  # past SQLite's 64-bit integers
        code, out, err = run_cli(capsys, *argv, "--ledger", ledger)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("ratchet: error:"), (argv, err)
    code, out, _ = run_cli(capsys, "idea", "list", "--ledger", ledger)
    assert code == 0 and "no ideas yet" in out
