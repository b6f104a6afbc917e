"""benchmarks/probes/kernel_breakdown.py and flush_cost.py: the per-kernel table and their refusals without a GPU
(what they measure needs one)."""

from pathlib import Path

import pytest
import torch

from benchmarks.probes import flush_cost
from benchmarks.probes.kernel_breakdown import KernelRow, kernel_rows, main
from one_line_refusal import assert_one_line_refusal


def test_rows_group_launches_by_kernel_per_call_longest_first():
    events = [("partials", 10.0), ("merge", 2.0), ("partials", 12.0), ("merge", 3.0), ("memset", 0.5)]
    assert kernel_rows(events, calls=2) == [KernelRow("partials", 1.0, 11.0), KernelRow("merge", 1.0, 2.5),
                                            KernelRow("memset", 0.5, 0.25)]


ROWWISE = str(Path(__file__).parent.parent / "src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so_and_fails(capsys):
    assert main(["--task", "rmsnorm", "--seed-file", ROWWISE]) == 2
    assert capsys.readouterr().err.strip() == "kernel_breakdown: needs a CUDA device"


@pytest.mark.parametrize("args, says", [
    (["--task", "nope", "--seed-file", ROWWISE], "unknown task 'nope'"),
    (["--task", "rmsnorm", "--seed-file", "/no/such.py"], "candidate file not found: /no/such.py"),
    (["--task", "rmsnorm", "--seed-file", ROWWISE, "--config", '{"X": 1}'], "config key 'X' is not in"),
    (["--task", "rmsnorm", "--seed-file", ROWWISE, "--config", "[1]"], "--config wants a JSON object"),
    (["--task", "rmsnorm", "--seed-file", ROWWISE, "--where", "T=7"], "no public gpu shape has {'T': 7}"),
])
def test_wrong_arguments_get_one_line_and_exit_2_on_any_machine(args, says, capsys):
    assert_one_line_refusal(main, args, "kernel_breakdown", says, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_flush_cost_without_a_gpu_says_so_and_fails(capsys):
    assert flush_cost.main([]) == 2
    assert capsys.readouterr().err.strip() == "flush_cost: needs a CUDA device"
