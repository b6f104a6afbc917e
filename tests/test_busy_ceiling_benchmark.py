"""benchmarks/probes/busy_ceiling.py: its shape choice, its table, its refusals (one line, exit 2, on any machine),
and on a GPU a ceiling whose rows keep the kernel a small share of the wall and the hold a large one."""

import json
from pathlib import Path

import pytest
import torch

from benchmarks.probes.busy_ceiling import main, pick_shape, render, summary
from one_line_refusal import assert_one_line_refusal

from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
DECODE = str(ROOT / "benchmarks" / "tasks" / "rmsnorm_decode.py")
ROWWISE = str(ROOT / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds" / "triton_rowwise.py")


def test_the_shape_is_the_first_public_gpu_shape_that_matches():
    task = load_task(DECODE)
    assert pick_shape(task, []) == task.shape_set("cuda").public[0]
    assert pick_shape(task, ["T=256", "H=8192"]) == {"T": 256, "H": 8192}
    with pytest.raises(ValueError, match="rmsnorm_decode: no public gpu shape has {'T': 3}"):
        pick_shape(task, ["T=3"])
    with pytest.raises(ValueError, match="--where wants SIZE=INTEGER, got 'T'"):
        pick_shape(task, ["T"])


def test_summary_and_table_by_hand():
    row = {"calls": 1000, "wall_us": 1_000_000.0, "kernel_us": 11_000.0, "samples": [40, 50, 60]}
    got = summary("protocol, eager", row, 300.0)
    assert got == {"row": "protocol, eager", "calls": 1000, "calls_per_s": 1000.0, "wall_us_per_call": 1000.0,
                   "busy_nvml_pct": 50.0, "kernel_pct": 1.1, "hold_pct": 30.0}
    bare = summary("kernel back to back (graph)", dict(row, kernel_us=None), None)
    lines = render([got, bare], "header").splitlines()
    assert lines[0] == "header" and lines[2].startswith("| row | calls |")
    assert lines[4] == "| protocol, eager | 1000 | 1000 | 1000 | 50.0% | 1.1% | 30.0% |"
    assert lines[5] == "| kernel back to back (graph) | 1000 | 1000 | 1000 | 50.0% | - | - |"


@pytest.mark.parametrize("args, says", [
    (["--task", "nope", "--seed-file", ROWWISE], "unknown task 'nope'"),
    (["--task", DECODE, "--seed-file", "missing.py"], "candidate file not found: missing.py"),
    (["--task", DECODE, "--seed-file", ROWWISE, "--where", "T=3"], "no public gpu shape has {'T': 3}"),
    (["--task", DECODE, "--seed-file", ROWWISE, "--seconds", "0"], "--seconds wants a positive number, got 0"),
    (["--task", DECODE, "--seed-file", ROWWISE, "--config", "{"], "--config is not JSON"),
    (["--task", DECODE, "--seed-file", ROWWISE, "--config", "[1]"], "--config wants a JSON object"),
    (["--task", DECODE, "--seed-file", ROWWISE, "--config", '{"num_warps": 3}'], "num_warps"),
])
def test_wrong_arguments_get_one_line_and_exit_2_on_any_machine(args, says, capsys):
    assert_one_line_refusal(main, args, "busy_ceiling", says, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so_and_fails(capsys):
    assert main(["--task", DECODE, "--seed-file", ROWWISE]) == 2
    assert capsys.readouterr().err.startswith("busy_ceiling: needs a CUDA device")


@pytest.mark.gpu
def test_gpu_ceiling_keeps_the_kernel_a_sliver_and_the_guards_cost_calls(tmp_path):
    assert main(["--task", DECODE, "--seed-file", ROWWISE, "--where", "T=1", "H=4096", "--seconds", "2",
                 "--out", str(tmp_path)]) == 0
    rows = {r["row"]: r for r in json.loads((tmp_path / "busy_ceiling.json").read_text())["rows"]}
    eager, bare = rows["protocol, eager"], rows["protocol, no guards"]
    for row in (eager, bare):
        assert 0 < row["kernel_pct"] < 5  # a microsecond kernel in a call of several hundred microseconds
        assert 10 < row["hold_pct"] < 60  # the 300 us hold at the boost clock, once a call
        assert 0 < row["busy_nvml_pct"] <= 100
    assert bare["calls_per_s"] > eager["calls_per_s"]  # the checks after each call cost host time
