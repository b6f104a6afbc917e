"""benchmarks/false_rejects.py: its list of honest candidates, its counts by reason code, and its refusals
(the full run, a thousand evaluations, is a benchmark, not a test)."""

import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest


from benchmarks.probes.false_rejects import honest_candidates, main, render, summarize  # noqa: E402
from one_line_refusal import assert_one_line_refusal  # noqa: E402


def test_the_cpu_candidates_are_the_cpu_twins_and_cpu_seeds():
    names = [h.name for h in honest_candidates("cpu", None)]
    assert "h08_slice_of_fresh_buffer" in names and "h04_output_pool[timed]" in names
    assert "rmsnorm/cpu_torch" in names and "top_p_sampling/cpu_sort" in names
    assert not any("gpu" in n or "triton" in n or "h13_graph" in n for n in names)
    assert all(h.candidate.is_file() for h in honest_candidates("cpu", None))
    assert [h.name for h in honest_candidates("cpu", "rmsnorm/")] == ["add_rmsnorm/cpu_torch", "rmsnorm/cpu_cpp",
                                                                "rmsnorm/cpu_torch"]


def test_counts_by_verdict_and_code():
    results = [
        {"name": "a", "verdict": "pass", "codes": [], "detail": "", "wall_s": 1.0},
        {"name": "b", "verdict": "fail", "codes": ["clock_mismatch"], "detail": "noise", "wall_s": 2.0},
        {"name": "b", "verdict": "fail", "codes": ["clock_mismatch"], "detail": "noise", "wall_s": 2.0},
        {"name": "c", "verdict": "error", "codes": ["timeout"], "detail": "slow", "wall_s": 9.0},
    ]
    args = Namespace(device="cpu", busy=True)
    s = summarize(results, honest_candidates("cpu", "rmsnorm/"), 2, args, 14.0)
    assert s["evaluations"] == 4 and s["false_rejects"] == 3
    assert s["by_code"] == {"fail clock_mismatch": 2, "error timeout": 1}
    assert s["candidates_by_code"]["fail clock_mismatch"] == {"b": 2}
    text = render(s)
    assert text.splitlines()[1] == "false rejects: 3"
    assert "fail clock_mismatch: 2 (b x2); e.g. b: noise" in text and "cores kept busy: yes" in text


@pytest.mark.parametrize("args, says", [
    (["--evaluations", "0"], "--evaluations wants a positive number, got 0"),
    (["--jobs", "0"], "--jobs wants a positive number, got 0"),
    (["--only", "no-such-candidate"], "no honest candidate for --device cpu matches --only no-such-candidate"),
])
def test_wrong_arguments_get_one_line_and_exit_2(args, says, capsys):
    assert_one_line_refusal(main, args, "false_rejects", says, capsys)


@pytest.mark.slow
def test_seconds_stops_between_evaluations_and_the_counts_are_saved_as_they_come(tmp_path, capsys):
    # A GPU round is about an hour, so --seconds must end a count inside a round: here after the first
    # evaluation of a round of ten, with what ran written to --out.
    out = tmp_path / "counts.json"
    code = main(["--only", "h0", "--evaluations", "10", "--jobs", "1", "--seconds", "0.001", "--out", str(out)])
    captured = capsys.readouterr()
    saved = json.loads(out.read_text())
    assert code == 0 and saved["evaluations"] == 1 and saved["false_rejects"] == 0 and saved["rounds"] == 0
    assert "stopped in round 1: --seconds 0.001 spent" in captured.err
    assert captured.out.startswith("1 honest evaluations (10 candidates x 0 rounds")
