"""benchmarks/probes/read_floor.py: the sizes it reads (from a task's cost model or in megabytes), its refusals, and
on a GPU a table whose reads are slower than the protocol's own floor and slower than the card can move."""

import re

import pytest
import torch

from benchmarks.probes.read_floor import Size, main, megabyte_sizes, task_sizes
from one_line_refusal import assert_one_line_refusal


def test_task_sizes_are_the_cost_models_bytes_of_each_matching_public_shape():
    sizes = task_sizes("decode_attention", {"B": 1, "Hq": 32})
    assert [s.label for s in sizes] == [f"decode_attention B=1 Hq=32 Hkv=8 L={L} D=128" for L in (4096, 32768, 131072)]
    # keys and values (2 x 8 heads x L x 128 bf16), the query and the output (32 x 128 bf16 each), one length
    assert [s.bytes for s in sizes] == [2 * 8 * L * 128 * 2 + 2 * 32 * 128 * 2 + 4 for L in (4096, 32768, 131072)]


def test_megabytes_are_decimal_and_must_be_positive():
    assert megabyte_sizes([16.8, 0.5]) == [Size("16.8 MB", 16_800_000), Size("0.5 MB", 500_000)]
    with pytest.raises(ValueError, match="above 0"):
        megabyte_sizes([1.0, -2.0])


@pytest.mark.parametrize("args, says", [
    ([], "give --task or --mb"),
    (["--mb", "0"], "--mb wants sizes above 0, got 0"),
    (["--task", "nope"], "unknown task 'nope'"),
    (["--task", "softmax", "--where", "M=3"], "no public gpu shape has {'M': 3}"),
    (["--mb", "4", "--where", "B=1"], "--where needs --task"),
    (["--mb", "4", "--reps", "0"], "--reps wants 1 or more, got 0"),
])
def test_wrong_arguments_get_one_line_and_exit_2_on_any_machine(args, says, capsys):
    assert_one_line_refusal(main, args, "read_floor", says, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so_and_fails(capsys):
    assert main(["--mb", "16.8"]) == 2
    assert capsys.readouterr().err.strip() == "read_floor: needs a CUDA device"


@pytest.mark.gpu
def test_gpu_reads_are_slower_than_the_fill_and_than_the_card(tmp_path):
    out = tmp_path / "floor.md"
    assert main(["--mb", "16.8", "134.2", "--reps", "10", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    fill = float(re.search(r"a one-element fill: ([0-9.]+) µs", lines[0]).group(1))
    rows = [line.split(" | ") for line in lines[3:]]
    assert [row[0] for row in rows] == ["| 16.8 MB", "| 134.2 MB"]
    for row in rows:
        best, tbps, past_fill = float(row[2]), float(row[3]), float(row[4])
        assert best > fill > 0
        assert 0 < tbps < past_fill < 8.0  # no faster than any HBM3e card moves bytes
        every = [float(x) for x in row[-1].rstrip(" |").split(", ")]
        assert len(every) == 4 and min(every) == pytest.approx(best)
