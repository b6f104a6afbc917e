"""Diversity of the LLM proposer: its parents come from distinct ideas (the fastest attempt of each),
not from three variants of one idea; each idea's outcome reaches the brief in one line."""

from ratchet.agents.brief import build_brief
from ratchet.run.ledger import Ledger
from ratchet.search.llm import LLMProposer, parent_section, parents_by_idea
from ratchet.search.llm_client import LLMSettings
from ratchet.task import load_task


def _verdict(speed, code=None, detail=""):
    return {"verdict": "pass" if speed else "fail", "speedup": speed, "shapes": [], "judge_wall_s": 1.0,
            "reasons": [{"code": code, "detail": detail}] if code else []}


def _recorded(tmp_path):
    """A run: idea 1 (three files, 3.0/2.9/2.8x, one more failing), idea 2 (1.5x), a model's own file
    (1.2x, tuned twice), a file that never passed."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    run_id = ledger.create_run(task="rmsnorm", task_path="rmsnorm", device="cpu", device_name="t", proposer="llm")
    pivot = ledger.add_idea("rmsnorm", "split each row across programs at small T", author="human")
    vec = ledger.add_idea("rmsnorm", "vectorized 16-byte loads", author="human")
    rows = [("x", pivot, 3.0, None), ("y", pivot, 2.9, None), ("z", pivot, 2.8, None),
            ("x2", pivot, None, ("wrong_output", "output 0: 12 of 7000 elements beyond atol at odd H=1001")),
            ("w", vec, 1.5, None), ("v", None, 1.1, None), ("v", None, 1.2, None),
            ("u", None, None, ("compile_error", "bad"))]
    for i, (source, idea, speed, failure) in enumerate(rows):
        code, detail = failure or (None, "")
        ledger.record_attempt(run_id, str(tmp_path / f"{source}.py"), f"# {source}\n", {"i": i},
                              _verdict(speed, code, detail), "llm", idea_id=idea,
                              idea=None if idea is None else ("pivot" if idea == pivot else "vec"))
    return ledger, run_id, pivot, vec


def test_parents_are_the_best_attempt_of_each_idea_in_turn(tmp_path):
    ledger, run_id, pivot, vec = _recorded(tmp_path)
    attempts = ledger.attempts(run_id)
    # The three fastest files are all idea 1: by idea, the parents are its best, idea 2's, and the model's own.
    top = parents_by_idea(attempts, 3)
    assert [(a["source"], a["speedup"], a["idea_id"]) for a in top] == [
        ("# x\n", 3.0, pivot), ("# w\n", 1.5, vec), ("# v\n", 1.2, None)]
    proposer = LLMProposer(load_task("rmsnorm"), ledger, run_id, [], None, LLMSettings(model="m"),
                           workdir=tmp_path / "w")
    picks = [proposer._choose_parent(n) for n in range(1, 5)]
    assert [p.source for p in picks] == ["# x\n", "# w\n", "# v\n", "# x\n"]
    assert picks[2].config == {"i": 6} and picks[0].idea == "pivot"
    assert "It was written for the idea: pivot" in parent_section(picks[0])


def test_each_idea_reaches_the_brief_in_one_line_with_its_last_failure(tmp_path):
    ledger, run_id, pivot, vec = _recorded(tmp_path)
    brief = build_brief(load_task("rmsnorm"), ledger, run_id, "cpu", 60000)
    line = next(l for l in brief.splitlines() if l.startswith(f"- [{pivot}]"))
    assert line == (f"- [{pivot}] split each row across programs at small T → 4 attempts, 3 passed, best 3.00x; "
                    "last failure wrong_output: output 0: 12 of 7000 elements beyond atol at odd H=1001")
    line = next(l for l in brief.splitlines() if l.startswith(f"- [{vec}]"))
    assert line == f"- [{vec}] vectorized 16-byte loads → 1 attempt, 1 passed, best 1.50x"
