"""The benchmark tables of docs/results/ as figures: the suite's per-shape speedups and the e2e decode ratios.

    python -m benchmarks.plot_results [--suite CSV] [--e2e MD ...] [--out DIR] [--format png|svg|html]

Reads what the benchmark scripts wrote, never measures: the suite's CSV (``benchmarks/suite.py --out``:
one row per task, shape and column, with ``speedup_vs_eager``) and the "Decode tokens/s" tables of
``benchmarks/e2e_stack.py``'s Markdown (eager, torch.compile + CUDA graphs, Ratchet's stack). For the e2e
figure a later file's row replaces an earlier one's for the same workload, context and batch (the files
are given oldest first). Each figure's title names its device and date from the tables. PNG and SVG go
through kaleido (``pip install -e '.[figures]'``; it drives the system's Chromium); HTML needs nothing.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
DEFAULT_SUITE = RESULTS / "2026-11-30-suite-best.csv"
DEFAULT_E2E = [RESULTS / "2026-12-01-e2e-stack.md", RESULTS / "2026-12-01-e2e-stack-deepseek.md"]
SUITE_COLUMNS = ("torch_compile", "liger", "best")  # eager is 1.0 by definition
COLUMN_NAMES = {"torch_compile": "torch.compile", "liger": "Liger-Kernel", "best": "Ratchet's best"}
E2E_GOAL = 1.3


class Refusal(Exception):
    """Bad input: one line, exit 2."""


def read_suite(path: Path) -> list[dict]:
    """The passing rows of a suite CSV with a speedup over eager."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise Refusal(f"cannot read {path}: {exc.strerror or exc}") from None
    if not rows or not {"task", "shape", "dtype", "column", "status", "speedup_vs_eager"} <= set(rows[0]):
        raise Refusal(f"{path} is not a suite CSV (benchmarks/suite.py --out writes one)")
    return [r for r in rows if r["status"] == "pass" and r["speedup_vs_eager"]]


def suite_figure(rows: list[dict], title: str) -> go.Figure:
    """Per task a panel; per shape a group of bars: each column's speedup over eager (dotted line: 1x)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig = make_subplots(rows=len(tasks), cols=1, subplot_titles=tasks, vertical_spacing=0.08)
    colors = {"torch_compile": "#7f7f7f", "liger": "#ff7f0e", "best": "#2ca02c"}
    for i, task in enumerate(tasks, start=1):
        mine = [r for r in rows if r["task"] == task]
        shapes = list(dict.fromkeys(f"{r['shape']} {r['dtype']}" for r in mine))
        for column in SUITE_COLUMNS:
            by_shape = {f"{r['shape']} {r['dtype']}": float(r["speedup_vs_eager"]) for r in mine if r["column"] == column}
            if not by_shape:
                continue
            fig.add_trace(go.Bar(x=shapes, y=[by_shape.get(s) for s in shapes], name=COLUMN_NAMES[column],
                                 marker_color=colors[column], legendgroup=column, showlegend=i == 1,
                                 meta=f"{task} {column}"), row=i, col=1)
        fig.add_hline(y=1.0, line_dash="dot", line_color="#888", row=i, col=1)
        fig.update_yaxes(title_text="x eager", row=i, col=1)
    fig.update_layout(template="plotly_white", barmode="group", title=title, height=260 * len(tasks) + 120,
                      width=1100, legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
                      margin=dict(t=110))
    return fig


_E2E_HEADER = "| workload | context | batch | eager | compile + graphs (reference) | Ratchet stack |"


def read_e2e(paths: list[Path]) -> tuple[list[dict], str]:
    """The decode tokens/s rows of e2e_stack.py tables (later files replace earlier rows of the same
    setting) and the device line of the last file."""
    rows: dict[tuple, dict] = {}
    device = ""
    for path in paths:
        try:
            text = path.read_text()
        except OSError as exc:
            raise Refusal(f"cannot read {path}: {exc.strerror or exc}") from None
        if _E2E_HEADER not in text:
            raise Refusal(f"{path} has no 'Decode tokens/s' table of benchmarks/e2e_stack.py")
        match = re.search(r"- device: \w+ \(([^)]+)\)", text)
        date = re.search(r"- date: (\d{4}-\d{2}-\d{2})", text)
        device = f"{match.group(1) if match else '?'}, {date.group(1) if date else '?'}"
        table = text.split(_E2E_HEADER, 1)[1].split("\n\n", 1)[0]
        for line in table.splitlines()[2:]:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 7 or not cells[1].isdigit():
                continue
            try:
                eager, reference, stack = (float(c) for c in cells[3:6])
            except ValueError:
                continue
            key = (cells[0], int(cells[1]), int(cells[2]))
            # The table's own ratio (from unrounded tokens/s) where it has one; else from the rounded cells.
            stated = re.fullmatch(r"([\d.]+)x", cells[6])
            rows[key] = {"workload": key[0], "context": key[1], "batch": key[2], "eager": eager,
                         "reference": reference, "stack": stack, "file": path.name,
                         "ratio": float(stated.group(1)) if stated else round(stack / reference, 3)}
    return list(rows.values()), device


def e2e_figure(rows: list[dict], title: str) -> go.Figure:
    """Tokens/s over the reference (torch.compile + CUDA graphs) per setting: eager and Ratchet's stack,
    the reference at 1 and the goal dashed."""
    rows = sorted(rows, key=lambda r: (r["workload"], r["context"], r["batch"]))
    labels = [f"{r['workload']} B={r['batch']} {r['context'] // 1024}k" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[round(r["eager"] / r["reference"], 3) for r in rows], name="eager",
                         marker_color="#bbbbbb", meta="eager"))
    ratio = [r["ratio"] for r in rows]
    fig.add_trace(go.Bar(x=labels, y=ratio, name="Ratchet's stack", marker_color="#2ca02c", meta="stack",
                         text=[f"{v:.3f}x" for v in ratio], textposition="outside"))
    fig.add_hline(y=1.0, line_color="#555", annotation_text="torch.compile + CUDA graphs", annotation_position="bottom right")
    fig.add_hline(y=E2E_GOAL, line_dash="dash", line_color="#d62728", annotation_text=f"goal {E2E_GOAL}x")
    fig.update_layout(template="plotly_white", barmode="group", title=title, width=900, height=480,
                      yaxis_title="decode tokens/s over torch.compile + CUDA graphs", yaxis_range=[0, 1.45],
                      legend=dict(orientation="h", y=-0.15))
    return fig


def suite_title(csv_path: Path) -> str:
    md = csv_path.with_suffix(".md")
    device = date = "?"
    if md.exists():
        text = md.read_text()
        found = re.search(r"\*\*Device\*\*: ([^;(]+)", text)
        when = re.search(r"\*\*Date\*\*: (\d{4}-\d{2}-\d{2})", text)
        device, date = (found.group(1).strip() if found else "?"), (when.group(1) if when else "?")
    return f"Suite: speedup over torch eager per shape ({device}, {date}; {csv_path.name})"


def write(fig: go.Figure, path: Path, fmt: str) -> Path:
    path = path.with_suffix(f".{fmt}")
    if fmt == "html":
        fig.write_html(path, include_plotlyjs=True)
    else:
        try:
            fig.write_image(path, scale=1)
        except Exception as exc:  # kaleido missing, or it found no Chromium: say which, in one line
            raise Refusal(f"cannot write {fmt}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]} "
                          "(pip install -e '.[figures]' and Debian's chromium, or --format html)") from None
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plot_results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="a suite CSV (benchmarks/suite.py)")
    parser.add_argument("--e2e", type=Path, nargs="+", default=DEFAULT_E2E, help="e2e_stack.py tables, oldest first")
    parser.add_argument("--out", type=Path, default=RESULTS / "figures")
    parser.add_argument("--format", choices=("png", "svg", "html"), default="png")
    args = parser.parse_args(argv)
    try:
        suite = read_suite(args.suite)
        e2e, device = read_e2e(args.e2e)
        args.out.mkdir(parents=True, exist_ok=True)
        written = [write(suite_figure(suite, suite_title(args.suite)), args.out / "suite-speedups", args.format),
                   write(e2e_figure(e2e, f"End to end: decode tokens/s over torch.compile + CUDA graphs<br><sup>{device}; "
                         f"{', '.join(p.name for p in args.e2e)}</sup>"),
                         args.out / "e2e-ratios", args.format)]
    except Refusal as exc:
        print(f"plot_results.py: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
