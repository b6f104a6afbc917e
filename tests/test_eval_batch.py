"""`ratchet eval TASK A.py B.py ...`: one process, files in order, JSON Lines; with --run each file is
recorded in order with the keep rule, exactly as judging the files one by one records them; a clearly
slower honest candidate is raced against the run's best, a faster one is not."""

import json
from pathlib import Path

import pytest

from ratchet.agents.api import create_agent_run
from ratchet.cli import main
from ratchet.run.ledger import Ledger
from ratchet.task import load_task

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "tasks" / "sleepy_axpby.py")
SLEEPY = DATA / "candidates" / "sleepy"
WRONG = str(DATA / "candidates" / "axpby_wrong.py")


def files(tmp_path):
    # A second slow file (another comment, so another source): judged after the fast one became the best.
    slow_copy = tmp_path / "slow_copy.py"
    slow_copy.write_text("# the slow one again\n" + (SLEEPY / "slow.py").read_text())
    fast = str(SLEEPY / "fast.py")
    return [str(SLEEPY / "slow.py"), fast, str(slow_copy), WRONG, fast]  # the last: a duplicate in the run


def new_run(ledger_path):
    with Ledger(ledger_path) as ledger:
        return create_agent_run(ledger, load_task(TASK), "cpu")


def rows(ledger_path, run):
    with Ledger(ledger_path) as ledger:
        return [(a["seq"], Path(a["candidate_path"]).name, a["verdict"], a["kept"], bool(a["extra"].get("raced")),
                 [r["code"] for r in a["reasons"]]) for a in ledger.attempts(run)]


def summary(objects):
    return [(o["verdict"], [r["code"] for r in o["reasons"]], o.get("raced"), o.get("kept"), o.get("attempt_seq"))
            for o in objects]


@pytest.mark.slow
def test_batch_equals_one_by_one_and_races_the_slow_file(tmp_path, capsys):
    paths = files(tmp_path)
    batch_ledger, single_ledger = str(tmp_path / "batch.sqlite"), str(tmp_path / "single.sqlite")
    batch_run, single_run = new_run(batch_ledger), new_run(single_ledger)

    code = main(["eval", TASK, *paths, "--run", batch_run, "--ledger", batch_ledger, "--json"])
    out, err = capsys.readouterr()
    batch = [json.loads(line) for line in out.splitlines()]
    assert code == 2 and len(batch) == len(paths)  # the duplicate is an error: the worst exit status
    assert err.count("\n") == 1 and "fast.py: run" in err and "already has an attempt" in err

    single, codes = [], []
    for path in paths:
        codes.append(main(["eval", TASK, path, "--run", single_run, "--ledger", single_ledger, "--json"]))
        out, _ = capsys.readouterr()
        (obj,) = [json.loads(line) for line in out.splitlines()]
        single.append(obj)
    assert codes == [0, 0, 0, 1, 2] and max(codes) == code

    assert summary(batch) == summary(single) == [
        ("pass", [], False, True, 1),
        ("pass", [], False, True, 2),
        ("pass", [], True, False, 3),
        ("fail", ["wrong_output"], False, False, 4),
        ("error", ["bad_input"], False, None, None)]
    assert rows(batch_ledger, batch_run) == rows(single_ledger, single_run) == [
        (1, "slow.py", "pass", 1, False, []), (2, "fast.py", "pass", 1, False, []),
        (3, "slow_copy.py", "pass", 0, True, []), (4, "axpby_wrong.py", "fail", 0, False, ["wrong_output"])]

    for objects in (batch, single):
        raced = objects[2]
        # Raced at the heaviest shape after a few batches; the lighter shape was never timed.
        assert raced["race"]["shape"] == {"N": 8192} and raced["race"]["slower"] > 3 and raced["race"]["best_seq"] == 2
        assert raced["keep_reason"].startswith("raced: ") and "slower than the best (attempt 2) at N=8192" in raced["keep_reason"]
        timed = {r["shape"]["N"]: r["reps"] for r in raced["shapes"] if not r["held_out"]}
        assert timed[8192] >= 8 and timed[1000] is None
        assert objects[1]["raced"] is False and objects[1]["keep_reason"].endswith(")")  # fast: timed in full
        assert all(r["reps"] for r in objects[1]["shapes"] if not r["held_out"])


def test_several_files_without_a_run_and_bad_usage(tmp_path, capsys):
    honest, wrong = str(DATA / "candidates" / "axpby_honest.py"), WRONG
    task = str(DATA / "tasks" / "axpby.py")
    code = main(["eval", task, wrong, str(tmp_path / "missing.py"), honest, "--device", "cpu", "--json",
                 "--no-timing"])
    out, err = capsys.readouterr()
    objects = [json.loads(line) for line in out.splitlines()]
    assert code == 2 and [o["verdict"] for o in objects] == ["fail", "error", "pass"]
    assert objects[1]["reasons"][0] == {"code": "bad_input", "detail": f"candidate file not found: {tmp_path / 'missing.py'}"}
    assert err.count("\n") == 1 and "missing.py: candidate file not found" in err
    code = main(["eval", task, honest, wrong, "--device", "cpu", "--no-timing"])
    out, _ = capsys.readouterr()
    assert code == 1 and out.count("PASS") == 1 and out.count("FAIL") == 1  # the worst: a fail
    # A task that cannot be loaded: one object per file, one line on stderr (from main), exit 2.
    code = main(["eval", str(tmp_path / "nope.py"), honest, wrong, "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and [json.loads(line)["reasons"][0]["code"] for line in out.splitlines()] == ["bad_input"] * 2
    assert err.count("\n") == 1


def test_a_chosen_shape_repeats_a_held_out_failure_in_seconds(tmp_path, capsys):
    """A file wrong only at one odd size: the task's own shapes may never draw it, --shape checks exactly it
    (every dtype), and the failed verdict names the machine that judged it. --shape without --no-timing, a
    dim the task has not, or a value that is no positive integer: one line, exit 2."""
    task = str(DATA / "tasks" / "axpby.py")
    odd = tmp_path / "wrong_at_77.py"
    odd.write_text("import torch\n\n\ndef kernel(x, y, a):\n"
                   "    out = torch.add(y, x, alpha=a)\n"
                   "    return out * 2 if x.shape[0] == 77 else out\n")
    code = main(["eval", task, str(odd), "--device", "cpu", "--no-timing", "--json", "--shape", '{"N": 77}',
                 "--shape", '{"N": 64}'])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1 and verdict["reasons"][0]["code"] == "wrong_output" and "{'N': 77}" in verdict["reasons"][0]["detail"]
    assert verdict["device_name"].startswith("cpu ")  # named before anything failed
    import torch
    import triton

    assert verdict["software"] == {"torch": torch.__version__, "triton": triton.__version__}  # no CUDA on a CPU run
    code = main(["eval", task, str(odd), "--device", "cpu", "--no-timing", "--json", "--shape", '{"N": 64}'])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0 and [(s["shape"], s["held_out"]) for s in verdict["shapes"]] == [({"N": 64}, False)] * len(
        load_task(task).dtypes)
    for bad, line in ((["--shape", '{"N": 64}'], "--shape goes with --no-timing"),
                      (["--no-timing", "--shape", '{"M": 64}'], "axpby's cpu shapes have no dim M (its dims: N)"),
                      (["--no-timing", "--shape", '{"N": 0}'], "give an object of positive integer dims")):
        code = main(["eval", task, str(odd), "--device", "cpu", *bad])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and line in err
