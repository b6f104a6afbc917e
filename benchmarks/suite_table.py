"""The tables of benchmarks/suite.py: one row per task x shape with a cell per column (suite.md), one
CSV row per task x shape x column (suite.csv, plottable), and everything with the full verdicts
(suite.json).

A cell quotes a time only from a passing verdict. Speedups are the quoted eager time (or the quoted
torch.compile time) over the cell's time, so every number in a row can be checked against the others;
cells timed in another mode than the row's (eager vs CUDA graph) get no speedup.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

COLUMNS = ("eager", "torch_compile", "liger", "best", "roofline")
PEERS = ("torch_compile", "liger", "best")
LABELS = {"eager": "eager", "torch_compile": "torch.compile", "liger": "Liger", "best": "best", "roofline": "roofline"}
# Where the eager time comes from: the reference timed interleaved in the first of these that passed.
EAGER_SOURCES = PEERS
CSV_FIELDS = ("task", "shape", "dtype", "column", "status", "reason", "mode", "median_us", "iqr_us", "floor_us",
              "tbps", "roofline_fraction", "speedup_vs_eager", "speedup_vs_compile", "judge_speedup", "winner",
              "above_datasheet", "eager_mode_us", "ref_median_us", "source", "shape_json")
# A peer's own interleaved reference farther than this from the quoted eager time is called out:
# the columns' times come from separate evaluations of the same run.
DRIFT = 0.05


# -- rows ------------------------------------------------------------------------------------------


def table_rows(results: list[dict], datasheet_tbps: float | None = None) -> list[dict]:
    rows = []
    for result in results:
        for shape, cost in zip(result["public"], result["costs"]):
            rows.append(shape_row(result, shape, cost, datasheet_tbps))
    return rows


def shape_row(result: dict, shape: dict, cost: dict, datasheet_tbps: float | None) -> dict:
    evals = result["evaluations"]
    timed = {peer: timed_row(evals.get(peer), shape) for peer in PEERS}
    source = next((p for p in EAGER_SOURCES if timed[p] is not None), None)
    mode = timed[source]["mode"] if source else None
    cells = {}
    if source:
        ref = timed[source]
        cells["eager"] = {"status": "pass", "reason": "", "mode": mode, "median_us": ref["ref_median_us"],
                          "iqr_us": ref["ref_iqr_us"], "judge_speedup": None, "source": source}
    else:
        cells["eager"] = empty("n/a", "no passing evaluation of this shape to take the reference's time from")
    for peer in PEERS:
        cells[peer] = peer_cell(evals.get(peer), timed[peer], shape, mode)
    cells["roofline"] = {"status": "floor", "reason": "", "mode": None, "median_us": cost["floor_us"],
                         "iqr_us": None, "judge_speedup": None, "source": "measured ceilings"}
    _derive(cells, mode, cost, datasheet_tbps)
    return {"task": result["task"], "dtype": result["dtype"], "shape": shape, "mode": mode,
            "floor_us": cost["floor_us"], "cells": cells, "winner": _winner(cells, mode)}


def timed_row(record: dict | None, shape: dict) -> dict | None:
    """The verdict's timed row of this shape, only from a passing verdict."""
    if not record or record["status"] != "pass" or not record.get("verdict"):
        return None
    for row in record["verdict"]["shapes"]:
        if not row["held_out"] and row["shape"] == shape and row["median_us"] is not None:
            return row
    return None


def empty(status: str, reason: str) -> dict:
    return {"status": status, "reason": reason, "mode": None, "median_us": None, "iqr_us": None,
            "judge_speedup": None, "source": ""}


def peer_cell(record: dict | None, row: dict | None, shape: dict, mode: str | None) -> dict:
    if record is None:
        return empty("not_run", "not in --peers")
    limits = record.get("limits") or {}
    if any(shape.get(k, 0) > v for k, v in limits.items()):
        return empty("n/a", "outside this peer's range (" + ", ".join(f"{k} <= {v}" for k, v in limits.items()) + ")")
    if record["status"] == "skipped":
        return empty("skipped", record["reason"])
    if record["status"] != "pass":
        return empty(record["status"], record["reason"])
    if row is None:
        return empty("n/a", "no timed row in the verdict")
    cell = {"status": "pass", "reason": "", "mode": row["mode"], "median_us": row["median_us"],
            "iqr_us": row["iqr_us"], "judge_speedup": row["speedup"], "source": record.get("candidate") or "",
            "eager_mode_us": row["eager_median_us"], "ref_median_us": row["ref_median_us"]}
    if mode == "eager" and row["mode"] == "graph":
        # The row's mode is eager (the reference took over --graph-below there): quote this peer's eager time,
        # which the same evaluation measured too (its eager reference time is not kept in graph mode).
        cell.update(mode="eager", median_us=row["eager_median_us"], iqr_us=None, judge_speedup=None,
                    ref_median_us=None)
    return cell


def _derive(cells: dict, mode: str | None, cost: dict, datasheet_tbps: float | None):
    eager = cells["eager"]["median_us"]
    compiled = cells["torch_compile"]["median_us"] if cells["torch_compile"]["mode"] == mode else None
    for name, cell in cells.items():
        us = cell["median_us"]
        comparable = name == "roofline" or cell["mode"] == mode
        cell["tbps"] = cost["bytes"] / us / 1e6 if us and cost["bytes"] else None
        cell["roofline_fraction"] = cost["floor_us"] / us if us and cost["floor_us"] else None
        cell["speedup_vs_eager"] = eager / us if us and eager and comparable else None
        cell["speedup_vs_compile"] = compiled / us if us and compiled and comparable else None
        cell["above_datasheet"] = bool(name != "roofline" and cell["tbps"] and datasheet_tbps
                                       and cell["tbps"] > datasheet_tbps)
        cell["winner"] = False
        ref = cell.get("ref_median_us")
        cell["ref_drift"] = ref / eager - 1 if ref and eager and comparable and name in PEERS else None


def _winner(cells: dict, mode: str | None) -> str | None:
    timed = [(cells[c]["median_us"], c) for c in ("eager",) + PEERS
             if cells[c]["status"] == "pass" and cells[c]["median_us"] and cells[c]["mode"] == mode]
    if not timed:
        return None
    best = min(timed)[1]
    cells[best]["winner"] = True
    return best


# -- files -----------------------------------------------------------------------------------------


def write_all(out: Path, meta: dict, results: list[dict]) -> list[dict]:
    rows = table_rows(results, meta.get("datasheet_tbps"))
    (out / "suite.json").write_text(json.dumps({"meta": meta, "results": results, "rows": rows}, indent=1))
    write_csv(out / "suite.csv", rows)
    (out / "suite.md").write_text(markdown(meta, results, rows))
    return rows


def shape_text(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def flat_rows(rows: list[dict]) -> list[dict]:
    """One flat record per task x shape x column (the CSV's rows, and the results file's), values as they are."""
    return [{"task": row["task"], "shape": row["shape"], "dtype": row["dtype"], "column": column,
             "floor_us": row["floor_us"], **{k: cell[k] for k in CSV_FIELDS if k in cell}}
            for row in rows for column, cell in ((c, row["cells"][c]) for c in COLUMNS)]


def write_csv(path: Path, rows: list[dict]):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for flat in flat_rows(rows):
            writer.writerow({**{k: _num(v) for k, v in flat.items()}, "shape": shape_text(flat["shape"]),
                             "shape_json": json.dumps(flat["shape"])})


def _num(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    return repr(value) if isinstance(value, float) else value


def _us(us: float) -> str:
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def _tbps(cell: dict) -> str:
    tbps, frac = cell["tbps"], 100 * cell["roofline_fraction"]
    return f"{tbps:.3g} TB/s · {frac:.0f}%" if frac >= 1 else f"{tbps:.2g} TB/s · {frac:.2g}%"


def _x(value) -> str:
    return f"{value:.2f}×" if value else "–"


def cell_text(name: str, cell: dict, row_mode: str | None) -> str:
    if cell["status"] in ("skipped", "not_run"):
        return "–"
    if cell["status"] == "n/a":
        return "n/a"
    if cell["status"] not in ("pass", "floor"):
        return f"{cell['status']}: {cell['reason']}"
    if not cell["median_us"]:
        return "–"
    us = _us(cell["median_us"])
    text = f"**{us}**" if cell["winner"] else us
    if name != "roofline" and cell["mode"] != row_mode:
        text += f" ({cell['mode']})"
    if cell["above_datasheet"]:
        text += " ⚠"
    parts = [text]
    if cell["tbps"] is not None:
        parts.append(_tbps(cell))
    if name != "eager":
        parts.append(f"{_x(cell['speedup_vs_eager'])} · {_x(cell['speedup_vs_compile'])}")
    return "<br>".join(parts)


def markdown(meta: dict, results: list[dict], rows: list[dict]) -> str:
    c = meta["ceilings"]
    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in meta["versions"].items())
    sheet = f" (datasheet {meta['datasheet_tbps']} TB/s)" if meta.get("datasheet_tbps") else ""
    comp = meta["compile"]
    lines = [
        "# Ratchet benchmark suite",
        "",
        f"- **Device**: {meta['device_name']} ({meta['driver']}); measured ceilings: copy {c['copy_tbps']:.2f} "
        f"TB/s{sheet}, matmul {c['matmul_tflops']:.1f} TFLOP/s",
        f"- **Date**: {meta['date']}; {versions}",
        *[f"- **Command**: `{command}`" for command in meta["commands"]],
        f"- **torch.compile**: mode {comp['mode']!r}, dynamic="
        f"{'False (one graph per shape)' if comp['dynamic'] == 'false' else 'None (torch default)'}, "
        "the task's reference at the task's dtype",
    ]
    for task, entry in (meta.get("best") or {}).items():
        budget = entry.get("budget") or entry.get("error", "")
        lines.append(f"- **best** for {task}: `{entry.get('path', '?')}`: {budget}")
    lines += [
        "",
        "Each cell: median µs (the row's mode: `graph` = CUDA-graph replay, used when the reference is under "
        f"{meta.get('graph_below_us', 50):g} µs), TB/s and percent of the roofline floor, speedup over eager · over "
        "torch.compile. "
        "**Bold**: fastest of the row. A verdict other than pass shows its reason code and no time; `–`: not "
        "run (see Evaluations); `n/a`: outside the peer's range. eager is the judge's reference timing, "
        "measured interleaved in the evaluation of the first passing column (torch.compile, Liger, best). "
        "⚠: above the datasheet's bandwidth.",
        "",
        "| task | shape | dtype | mode | roofline µs | eager | torch.compile | Liger | best | fastest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = " | ".join(cell_text(name, row["cells"][name], row["mode"]) for name in ("eager",) + PEERS)
        floor = _us(row["floor_us"]) if row["floor_us"] else "–"
        lines.append(f"| {row['task']} | {shape_text(row['shape'])} | {row['dtype']} | {row['mode'] or '–'} | "
                     f"{floor} | {cells} | {LABELS.get(row['winner'], '–') if row['winner'] else '–'} |")
    lines += ["", "## Evaluations", ""] + evaluation_lines(results)
    notes = list(meta.get("notes") or []) + verdict_notes(results)
    if any(cell["above_datasheet"] for row in rows for cell in row["cells"].values()):
        notes.append("⚠ marks a time whose bytes over it exceed the datasheet bandwidth: check the task's cost "
                     "model and the kernel (the judge refuses only what beats the measured copy ceiling by 15%)")
    for row in rows:
        for name in PEERS:
            drift = row["cells"][name].get("ref_drift")
            if drift is not None and abs(drift) > DRIFT:
                notes.append(f"{row['task']} {shape_text(row['shape'])}: the reference timed in the {LABELS[name]} "
                             f"evaluation is {100 * drift:+.0f}% off the quoted eager time (separate evaluations; "
                             f"that column's own judged speedup is in suite.csv, judge_speedup)")
    if len(meta["commands"]) > 1:
        notes.append("merged from several runs: a row's columns may come from different sessions; each column's "
                     "judge_speedup in suite.csv is against its own interleaved reference")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


def evaluation_lines(results: list[dict]) -> list[str]:
    lines = []
    for result in results:
        for peer, rec in result["evaluations"].items():
            head = f"- {result['task']} {result['dtype']} {LABELS[peer]}:"
            if rec["status"] == "skipped":
                lines.append(f"{head} skipped: {rec['reason']}")
                continue
            where = (" (generated: its source is in suite.json)" if rec.get("source")
                     else f" `{rec['candidate']}`" if rec.get("candidate") else "")
            if rec["status"] == "pass":
                speed = rec["verdict"].get("speedup")
                speed = f"{speed:.3f}x over eager (judge's weighted geomean)" if speed else "no speedup"
                text = f"{head} pass, {speed}, judged in {rec['wall_s']:.0f} s{where}"
            else:
                text = f"{head} {rec['status']}: {rec['reason']}: {rec['detail'][:300]}{where}"
            if rec.get("note"):
                text += f". {rec['note']}"
            lines.append(text)
    return lines


def verdict_notes(results: list[dict]) -> list[str]:
    notes = []
    for result in results:
        for peer, rec in result["evaluations"].items():
            for note in (rec.get("verdict") or {}).get("notes") or []:
                notes.append(note if "CPU times" in note else f"{result['task']} {LABELS[peer]}: {note}")
    return notes
