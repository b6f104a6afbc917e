"""benchmarks/plot_results.py: the figures hold the docs/results tables' own numbers; bad input is one line."""

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
from benchmarks import plot_results  # noqa: E402

from one_line_refusal import assert_one_line_refusal  # noqa: E402


def test_suite_figure_bars_are_the_csv_speedups():
    rows = plot_results.read_suite(plot_results.DEFAULT_SUITE)
    fig = plot_results.suite_figure(rows, "t")
    with plot_results.DEFAULT_SUITE.open(newline="") as handle:
        want = {(r["task"], f"{r['shape']} {r['dtype']}", r["column"]): float(r["speedup_vs_eager"])
                for r in csv.DictReader(handle) if r["status"] == "pass" and r["column"] in plot_results.SUITE_COLUMNS}
    got = {}
    for trace in fig.data:
        task, column = trace.meta.split(" ")
        for shape, y in zip(trace.x, trace.y):
            if y is not None:
                got[(task, shape, column)] = y
    assert got == want and len(got) >= 40


def test_e2e_figure_ratios_are_the_tables_and_later_files_win():
    rows, device = plot_results.read_e2e(plot_results.DEFAULT_E2E)
    assert device == "NVIDIA H200, 2026-12-01"
    by_key = {(r["workload"], r["context"], r["batch"]): r for r in rows}
    # The README's two headline rows: llama from the first table, deepseek from the later one.
    assert by_key[("llama", 32768, 32)]["ratio"] == 1.143 and by_key[("llama", 32768, 32)]["stack"] == 6670
    assert by_key[("deepseek", 32768, 32)]["ratio"] == 1.013
    assert by_key[("deepseek", 32768, 32)]["file"] == "2026-12-01-e2e-stack-deepseek.md"
    fig = plot_results.e2e_figure(rows, "t")
    stack = next(t for t in fig.data if t.meta == "stack")
    eager = next(t for t in fig.data if t.meta == "eager")
    ordered = sorted(rows, key=lambda r: (r["workload"], r["context"], r["batch"]))
    assert list(stack.y) == [r["ratio"] for r in ordered]
    assert list(eager.y) == [round(r["eager"] / r["reference"], 3) for r in ordered]


def test_html_needs_no_kaleido(tmp_path, capsys):
    assert plot_results.main(["--out", str(tmp_path), "--format", "html"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e2e-ratios.html", "suite-speedups.html"]


@pytest.mark.parametrize("args, says", [
    (["--suite", "missing.csv"], "cannot read missing.csv"),
    (["--e2e", "docs/results/2026-11-30-flush-cost.md"], "has no 'Decode tokens/s' table"),
    (["--suite", "docs/results/README.md"], "is not a suite CSV"),
])
def test_bad_input_is_one_line(args, says, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert_one_line_refusal(plot_results.main, [*args, "--out", str(tmp_path), "--format", "html"],
                            "plot_results.py", says, capsys)
