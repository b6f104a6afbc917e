"""The judge's phase order: correctness first on the smallest public shape at the first dtype, so a
kernel wrong there fails before any other shape is checked or the reference's worker starts; a kernel
wrong only at a larger shape fails there with the reason it always had."""

from pathlib import Path

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.evaluation import Evaluation

DATA = Path(__file__).parent / "data"


def reversed_task(tmp_path) -> str:
    """axpby with its public shapes declared largest first."""
    text = (DATA / "tasks" / "axpby.py").read_text().replace('public=[{"N": 1000}, {"N": 4096}]',
                                                              'public=[{"N": 4096}, {"N": 1000}]')
    assert '{"N": 4096}, {"N": 1000}' in text
    path = tmp_path / "axpby_reversed.py"
    path.write_text(text)
    return str(path)


def judged(monkeypatch, task_path, candidate, time_it=False):
    from ratchet.task import load_task

    checked, started = [], []
    real_check, real_start = Evaluation._check_shape, Evaluation._start_reference
    monkeypatch.setattr(Evaluation, "_check_shape",
                        lambda self, shape, dtype, held: (checked.append((dict(shape), held)),
                                                          real_check(self, shape, dtype, held))[1])
    monkeypatch.setattr(Evaluation, "_start_reference",
                        lambda self: (started.append(len(checked)), real_start(self))[1])
    verdict = evaluate(load_task(task_path), load_candidate(DATA / "candidates" / candidate), {},
                       JudgeOptions(device="cpu", time_it=time_it))
    return verdict, checked, started


def test_a_kernel_wrong_at_the_smallest_shape_fails_there_alone(tmp_path, monkeypatch):
    verdict, checked, started = judged(monkeypatch, reversed_task(tmp_path), "axpby_wrong.py", time_it=True)
    assert verdict.verdict == "fail" and verdict.reasons[0].code == "wrong_output"
    assert verdict.reasons[0].detail.startswith("shape {'N': 1000} float32 output 0:")
    assert checked == [({"N": 1000}, False)]  # nothing else was checked
    assert started == []  # and the reference's worker never started


def test_a_kernel_wrong_only_at_a_larger_shape_fails_there_as_before(tmp_path, monkeypatch):
    verdict, checked, started = judged(monkeypatch, reversed_task(tmp_path), "axpby_wrong_large.py")
    assert verdict.verdict == "fail" and [r.code for r in verdict.reasons] == ["wrong_output"]
    assert verdict.reasons[0].detail.startswith("shape {'N': 4096} float32 output 0: 1 of 4096 elements")
    assert checked[:2] == [({"N": 1000}, False), ({"N": 4096}, False)]


def test_an_honest_kernel_keeps_the_declared_row_order(tmp_path, monkeypatch):
    verdict, checked, started = judged(monkeypatch, reversed_task(tmp_path), "axpby_honest.py", time_it=True)
    assert verdict.verdict == "pass", verdict.reasons
    assert [(r.shape["N"], r.held_out) for r in verdict.shapes][:2] == [(4096, False), (1000, False)]
    assert checked[0] == ({"N": 1000}, False) and len(checked) == 3 and started[0] == 1  # after the first shape
    assert all(r.reps for r in verdict.shapes if not r.held_out)


def test_a_failed_verdict_lists_the_shapes_found_right_and_the_one_it_failed_at(tmp_path, monkeypatch):
    verdict, checked, _ = judged(monkeypatch, reversed_task(tmp_path), "axpby_wrong_large.py")
    assert verdict.verdict == "fail"
    assert [(r.shape, r.held_out, r.correct) for r in verdict.shapes] == [({"N": 1000}, False, True),
                                                                         ({"N": 4096}, False, False)]
    assert verdict.speedup is None and all(r.median_us is None for r in verdict.shapes)
    rows = verdict.to_json()["shapes"]  # what `ratchet eval --json` prints and the ledger keeps
    assert [r["correct"] for r in rows] == [True, False]


def test_a_kernel_wrong_at_its_first_shape_lists_only_that_one(tmp_path, monkeypatch):
    verdict, _, _ = judged(monkeypatch, reversed_task(tmp_path), "axpby_wrong.py", time_it=True)
    assert [(r.shape, r.correct) for r in verdict.shapes] == [({"N": 1000}, False)]


def test_the_console_says_where_a_failed_verdict_was_right_and_where_it_failed(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from ratchet.report.console import print_verdict

    verdict, _, _ = judged(monkeypatch, reversed_task(tmp_path), "axpby_wrong_large.py")
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, width=200, color_system=None))
    lines = out.getvalue().splitlines()
    assert "  shapes found right before it ended: N=1000 float32" in lines
    assert "  failed at: N=4096 float32" in lines
