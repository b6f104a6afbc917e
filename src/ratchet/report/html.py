"""The HTML report of a run or a campaign: one self-contained file that opens with no network.

plotly.js is embedded once per page, inline; every figure comes from :mod:`ratchet.report.plots` and
every text from the ledger is escaped (candidate paths, ideas and reasons are other people's text). The
same sections make the dashboard's run and campaign pages (:mod:`ratchet.report.dashboard`), which load
plotly.js from the dashboard itself instead of inlining it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Iterable

import plotly.graph_objects as go

from ratchet.diagnose.bottleneck import RULE, classify_row_with_counters, labelled
from ratchet.report import plots
from ratchet.report.plotly_bundle import plotly_js
from ratchet.report.ledger_view import LedgerView
from ratchet.run.ledger import LedgerError

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f4f4f4; } .note { color: #666; font-size: 0.9em; } .pass { color: #2ca02c; }
.fail { color: #d62728; } .error { color: #ff7f0e; } pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
.small-multiples { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 0.5em; }
"""


def gates_dir(ledger_path: str | Path) -> Path:
    """Gate outcomes live next to the ledger (the rule of ``ratchet.e2e.gate.gates_dir_for``, which imports
    torch; the report does not need it)."""
    return Path(ledger_path).parent / "gates"


def read_gates(ledger_path: str | Path, run_id: str) -> list[dict]:
    """Every gate JSON recorded for a run (``<run>-<workload>-<size>-<device>.json``), by file name."""
    out = []
    for path in sorted(gates_dir(ledger_path).glob(f"{run_id}-*.json")):
        try:
            gate = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(gate, dict) and gate.get("run") == run_id:
            out.append(gate)
    return out


def figure_div(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOTLY_CONFIG)


def table(header: Iterable[str], rows: Iterable[Iterable]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def _fmt_x(value) -> str:
    return f"{value:.3f}x" if value else "-"


def section(title: str, *parts: str) -> str:
    return f"<h2>{escape(title)}</h2>" + "".join(parts)


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>' if text else ""


# -- a run -----------------------------------------------------------------------------------------------

def run_header(run: dict) -> str:
    stop = f" ({run['stop_reason']})" if run.get("stop_reason") else ""
    return (f"<h1>run <span class=run-id>{escape(run['id'])}</span>: {escape(run['task'])}</h1>"
            f"<p>{escape(run['device'])} ({escape(run.get('device_name') or '')}), proposer "
            f"{escape(run.get('proposer') or '')}, {escape(run['status'])}{escape(stop)}; "
            f"<b id=attempt-count>{run['attempts']}</b> attempts, best <b>{_fmt_x(run.get('best_speedup'))}</b>; "
            f"started {escape(run['created_at'])}</p>")


@dataclass
class RunPicture:
    """A run as the report and the dashboard show it: its rows, its best and that best's lineage, the
    figures by name and the notes beside them."""

    run: dict
    attempts: list[dict]
    best: dict | None
    chain: list[dict]
    ideas: dict[int, str]
    figures: dict[str, go.Figure] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def run_picture(view: LedgerView, run_id: str) -> RunPicture:
    run = view.run(run_id)
    attempts = view.attempts(run_id)
    history = view.best_history(run_id)
    best_id = history[-1]["attempt_id"] if history else None
    best = next((a for a in attempts if a["id"] == best_id), None)
    ideas = {i["id"]: i["text"] for i in view.ideas(run["task"])}
    pic = RunPicture(run, attempts, best, plots.lineage(attempts, best, history), ideas)
    shapes, pic.notes["shapes"] = plots.shapes_figure(best)
    roofline, pic.notes["roofline"] = plots.roofline_figure(best, run)
    pic.figures = {"progress": plots.progress_figure(run, attempts),
                   "progress_time": plots.progress_time_figure(run, attempts),
                   "failures": plots.failure_figure(attempts), "shapes": shapes, "roofline": roofline,
                   "lineage": plots.lineage_figure(pic.chain, ideas)}
    landscape = plots.landscape_figure(attempts)
    # Always a figure, empty until a config is searched: the dashboard redraws it in place when one is.
    pic.figures["landscape"] = landscape if landscape is not None else go.Figure(layout=plots.LAYOUT)
    pic.notes["landscape"] = "" if landscape is not None else "no attempt carried a config (no SPACE was searched)"
    return pic


def run_blocks(pic: RunPicture) -> dict[str, str]:
    """The run's text parts by element id (the header, the tables, the notes): the dashboard replaces them
    when the ledger moves, as it redraws the figures."""
    failures = plots.failure_counts(pic.attempts)
    return {"run-header": run_header(pic.run),
            "tbl-failures": table(("reason", "attempts"), sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))),
            "tbl-shapes": note(pic.notes["shapes"]) + best_table(pic.best),
            "note-roofline": note(pic.notes["roofline"]),
            "tbl-lineage": lineage_table(pic.chain, pic.ideas),
            "note-landscape": note(pic.notes["landscape"])}


def run_body(view: LedgerView, run_id: str, ledger_path: str | Path, pic: RunPicture | None = None) -> str:
    pic = pic or run_picture(view, run_id)
    figures, blocks = pic.figures, run_blocks(pic)

    def block(name: str) -> str:
        return f'<div id="{name}">{blocks[name]}</div>'

    parts = [block("run-header"),
             section("progress", figure_div(figures["progress"], "fig-progress"),
                     figure_div(figures["progress_time"], "fig-progress_time")),
             section("failures by reason", figure_div(figures["failures"], "fig-failures"), block("tbl-failures")),
             section("the best per shape", figure_div(figures["shapes"], "fig-shapes"), block("tbl-shapes")),
             section("roofline", figure_div(figures["roofline"], "fig-roofline"), block("note-roofline")),
             section("lineage of the best", figure_div(figures["lineage"], "fig-lineage"), block("tbl-lineage")),
             section("the tuner's landscape", figure_div(figures["landscape"], "fig-landscape"),
                     block("note-landscape"))]
    gates = read_gates(ledger_path, run_id)
    if gates:
        parts.append(section("end-to-end gates", *(gate_html(g, f"fig-gate-{i}") for i, g in enumerate(gates))))
    return "".join(parts)


def best_table(best: dict | None) -> str:
    """The best's timed rows, each with what limits it (``ratchet.diagnose.bottleneck``, the rule of
    ``ratchet show``: from the judge's figures and the stored ceilings, refined by ncu's counters where
    they were read on that shape)."""
    if not best:
        return note("nothing kept yet")
    extra = best.get("extra") or {}
    rows = [(plots.shape_label(r), r.get("median_us"), r.get("ref_median_us"), r.get("speedup"),
             r.get("achieved_tbps"), r.get("achieved_tflops"),
             None if r.get("roofline_fraction") is None else f"{100 * r['roofline_fraction']:.0f}%",
             labelled(*classify_row_with_counters(r, extra.get("ceilings"), extra.get("counters"))))
            for r in plots.timed_rows(best)]
    return (table(("shape", "median µs", "reference µs", "speedup", "TB/s", "TFLOP/s", "of floor", "limited by"), rows)
            + note(RULE))


def lineage_table(chain: list[dict], ideas: dict[int, str]) -> str:
    if not chain:
        return note("no best yet, so no lineage")
    rows = [(a["seq"], str(a.get("candidate_path") or "").rsplit("/", 1)[-1], json.dumps(a.get("config") or {}),
             a.get("proposer"), ideas.get(a.get("idea_id")) or a.get("idea"),
             next((p["seq"] for p in chain if p["id"] == a.get("parent_attempt")), None),
             _fmt_x(a.get("speedup")), "kept" if a.get("kept") else "") for a in chain]
    return table(("#", "candidate", "config", "proposer", "idea", "parent #", "speedup", ""), rows)


def gate_html(gate: dict, div_id: str) -> str:
    rows = [(s.get("kind"), s.get("batch"), s.get("length"), s.get("graphs"), s.get("verdict"), s.get("reason"),
             s.get("baseline_us"), s.get("kernel_us"), s.get("ratio"), s.get("detail")) for s in gate.get("settings") or []]
    return (figure_div(plots.gate_figure(gate), div_id) +
            table(("kind", "batch", "length", "graphs", "verdict", "reason", "baseline µs", "kernel µs", "ratio",
                   "detail"), rows))


# -- a campaign ------------------------------------------------------------------------------------------

def campaign_body(view: LedgerView, campaign_id: str, ledger_path: str | Path) -> str:
    campaign = view.campaign(campaign_id)
    runs = view.campaign_runs(campaign_id)
    label = campaign.get("model") or campaign.get("workload") or ""
    parts = [f"<h1>campaign <span class=campaign-id>{escape(str(campaign_id))}</span> {escape(str(label))}</h1>",
             f"<p>{len(runs)} runs: " + ", ".join(f"<span class=run-id>{escape(r['id'])}</span>" for r in runs) + "</p>"]
    amdahl = plots.amdahl_rows(campaign, runs)
    parts.append(section("Amdahl: what each op gives the step", table(
        ("op", "run", "share of the decode step", "best kernel speedup", "step speedup from it alone", "attempts",
         "status"), [(r["task"], r["run"], r["share"], r["best_speedup"], r["step_speedup"], r["attempts"],
                      r["status"]) for r in amdahl]),
        note("" if any(r["share"] is not None for r in amdahl) else
             "the campaign stores no profile, so the shares are not known here")))
    small = [figure_div(plots.progress_figure(r, view.attempts(r["id"]), small=True), f"fig-run-{i}")
             for i, r in enumerate(runs)]
    parts.append(section("each op's run", '<div class="small-multiples">' + "".join(small) + "</div>"))
    gates = [(r["id"], g) for r in runs for g in read_gates(ledger_path, r["id"])]
    parts.append(section("gate results per setting", *(gate_html(g, f"fig-gate-{i}") for i, (_, g) in enumerate(gates)),
                         note("" if gates else "no gate recorded for these runs")))
    stacks = plots.find_stacks({k: v for k, v in campaign.items()})
    parts.append(section("stacking waterfall", *(figure_div(plots.waterfall_figure(s), f"fig-stack-{i}")
                                                 for i, s in enumerate(stacks)),
                         note("" if stacks else "no stacking result stored with the campaign yet")))
    return "".join(parts)


# -- pages -----------------------------------------------------------------------------------------------

def page(title: str, body: str, plotly_src: str | None = None, script: str = "", with_plotly: bool = True) -> str:
    """A whole page. ``plotly_src`` None: plotly.js inline (the self-contained report); else its URL;
    ``with_plotly`` False for a page without figures."""
    if not with_plotly:
        plotly = ""
    elif plotly_src is None:
        plotly = f"<script>{plotly_js()}</script>"
    else:
        plotly = f'<script src="{escape(plotly_src)}"></script>'
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{STYLE}</style>{plotly}</head><body>{body}{script}</body></html>")


def resolve_target(view: LedgerView, target: str) -> str:
    """'run' or 'campaign' for a RUN|CAMPAIGN argument; one-line LedgerError otherwise."""
    if view.has_run(target):
        return "run"
    if not view.has_campaigns:
        raise LedgerError(f"unknown run '{target}'; this ledger records no campaigns (see 'ratchet runs')")
    view.campaign(target)  # raises the one-line error for an unknown id
    return "campaign"


def write_report(ledger_path: str | Path, target: str, out: str | Path) -> Path:
    with LedgerView(ledger_path) as view:
        kind = resolve_target(view, target)
        body = run_body(view, target, ledger_path) if kind == "run" else campaign_body(view, target, ledger_path)
    html = page(f"Ratchet {kind} {target}", body)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
