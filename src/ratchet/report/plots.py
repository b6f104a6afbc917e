"""Plotly figures built from ledger rows (``LedgerView``'s decoded runs and attempts), for the HTML report
and the dashboard alike.

Every figure is a ``plotly.graph_objects.Figure`` whose traces carry exactly the ledger's rows: one point
per attempt in the progress plots, one bar per reason code with the ledger's count, so a test (or a
person) can check a figure against the ledger. Attempts the judge gave no speedup (failures and errors)
are drawn at speedup 0 with an ``x`` marker: they are most of a run and belong in the picture.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from html import escape
from typing import Any, Iterable

import plotly.graph_objects as go
from plotly.subplots import make_subplots

KEPT, PASSED, RACED, ERROR = "kept", "passed", "raced", "error"
_COLORS = {KEPT: "#2ca02c", PASSED: "#1f77b4", RACED: "#9467bd", ERROR: "#ff7f0e"}
# Failure reasons get colours of their own, in the order they first appear in a run.
_FAIL_PALETTE = ("#d62728", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#17becf", "#a55194", "#843c39",
                 "#ad494a", "#636363")
SYMBOL_TIMED, SYMBOL_UNTIMED = "circle", "x"  # an outcome is timed (passed) or not, never both
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), height=380,
              legend=dict(orientation="h", y=-0.2))


# -- reading attempts ----------------------------------------------------------------------------------

def keep_reason(attempt: dict) -> str:
    """Why an attempt was or was not kept, where the ledger recorded it (a column or the verdict's extra)."""
    return str(attempt.get("keep_reason") or (attempt.get("extra") or {}).get("keep_reason") or "")


def first_reason(attempt: dict) -> str | None:
    reasons = attempt.get("reasons") or []
    return reasons[0].get("code") if reasons and isinstance(reasons[0], dict) else None


def outcome(attempt: dict) -> str:
    """kept, raced (a keep_reason starting 'raced'), passed, 'fail: CODE' by first reason, or error."""
    if attempt.get("kept"):
        return KEPT
    if keep_reason(attempt).startswith("raced"):
        return RACED
    if attempt.get("verdict") == "pass":
        return PASSED
    if attempt.get("verdict") == "fail":
        return f"fail: {first_reason(attempt) or 'unknown'}"
    return ERROR


def outcome_order(attempts: Iterable[dict]) -> list[str]:
    seen = list(dict.fromkeys(outcome(a) for a in attempts))
    fixed = [o for o in (KEPT, RACED, PASSED) if o in seen]
    return fixed + sorted(o for o in seen if o.startswith("fail")) + ([ERROR] if ERROR in seen else [])


def outcome_colors(order: list[str]) -> dict[str, str]:
    colors, fails = {}, iter(_FAIL_PALETTE * 10)
    for name in order:
        colors[name] = _COLORS.get(name) or next(fails)
    return colors


def failure_counts(attempts: Iterable[dict]) -> Counter:
    """Attempts that did not pass, by their first (primary) reason code."""
    return Counter(first_reason(a) or "unknown" for a in attempts if a.get("verdict") != "pass")


def shape_label(row: dict) -> str:
    shape = " ".join(f"{k}={v}" for k, v in (row.get("shape") or {}).items())
    mode = f" ({row['mode']})" if row.get("mode") else ""
    return f"{shape} {row.get('dtype') or ''}{mode}".strip()


def _elapsed_min(attempt: dict, start: datetime | None) -> float | None:
    try:
        at = datetime.fromisoformat(attempt["created_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return round((at - start).total_seconds() / 60.0, 4) if start else None


def _start(run: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(run["created_at"])
    except (KeyError, TypeError, ValueError):
        return None


def _hover(a: dict) -> str:
    """One attempt in a hover label. Plotly reads a few HTML tags in labels: people's text is escaped."""
    name = str(a.get("candidate_path") or "").rsplit("/", 1)[-1]
    config = ",".join(f"{k}={v}" for k, v in (a.get("config") or {}).items())
    speed = f" {a['speedup']:.3f}x" if a.get("speedup") else ""
    why = f" {first_reason(a)}" if first_reason(a) else ""
    return escape(f"#{a['seq']} {name} {config[:60]} {a.get('verdict')}{speed}{why}")


def _y(a: dict) -> float:
    return round(float(a["speedup"]), 4) if a.get("speedup") else 0.0


def best_curve(attempts: list[dict]) -> tuple[list[int], list[float]]:
    """The best speedup after each attempt: steps up at every kept attempt (speedup 0 before the first)."""
    xs, ys, best = [], [], 0.0
    for a in attempts:
        if a.get("kept") and a.get("speedup"):
            best = float(a["speedup"])  # a kept attempt is the new best, by the keep rule
        xs.append(a["seq"])
        ys.append(round(best, 4))
    return xs, ys


# -- a run -----------------------------------------------------------------------------------------------

def progress_figure(run: dict, attempts: list[dict], small: bool = False) -> go.Figure:
    """Best speedup against attempts, every attempt a point coloured by outcome: one trace per outcome,
    named by it, holding exactly those attempts (the failures at 0, as crosses)."""
    fig = go.Figure()
    xs, best = best_curve(attempts)
    fig.add_trace(go.Scatter(x=xs, y=best, mode="lines", name="best", meta="best",
                             line=dict(shape="hv", color="#2ca02c", width=2), hoverinfo="skip"))
    order = outcome_order(attempts)
    colors = outcome_colors(order)
    for name in order:
        mine = [a for a in attempts if outcome(a) == name]
        fig.add_trace(go.Scatter(
            x=[a["seq"] for a in mine], y=[_y(a) for a in mine], mode="markers", name=f"{name} ({len(mine)})",
            meta="attempts", marker=dict(color=colors[name], size=5 if small else 7,
                                         symbol=SYMBOL_TIMED if mine and mine[0].get("speedup") else SYMBOL_UNTIMED),
            text=None if small else [_hover(a) for a in mine], hoverinfo="x+y" if small else "text"))
    fig.update_layout(**LAYOUT, title=f"{run['id']} {run['task']}" if small else "best speedup vs attempts",
                      xaxis_title="attempt", yaxis_title="speedup (x reference)")
    if small:
        fig.update_layout(height=240, showlegend=False, margin=dict(l=40, r=10, t=40, b=30))
    return fig


def progress_time_figure(run: dict, attempts: list[dict]) -> go.Figure:
    """Best speedup against wall time (minutes since the run started), with the attempts judged so far on a
    second axis: how fast the search moves, beside how far it got. Lines only; the points are on the
    attempts plot."""
    start = _start(run)
    minutes = [_elapsed_min(a, start) for a in attempts]
    _, best = best_curve(attempts)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=minutes, y=best, mode="lines", name="best speedup", meta="best",
                             line=dict(shape="hv", color="#2ca02c", width=2)), secondary_y=False)
    fig.add_trace(go.Scatter(x=minutes, y=[a["seq"] for a in attempts], mode="lines", name="attempts judged",
                             meta="count", line=dict(color="#999", dash="dot")), secondary_y=True)
    fig.update_layout(**LAYOUT, title="best speedup vs wall time", xaxis_title="minutes since the run started")
    fig.update_yaxes(title_text="speedup (x reference)", secondary_y=False)
    fig.update_yaxes(title_text="attempts", secondary_y=True)
    return fig


def failure_figure(attempts: list[dict]) -> go.Figure:
    counts = failure_counts(attempts)
    codes = sorted(counts, key=lambda c: (-counts[c], c))
    errors = {first_reason(a) for a in attempts if a.get("verdict") == "error"}
    fig = go.Figure(go.Bar(x=codes, y=[counts[c] for c in codes], meta="reasons", name="attempts",
                           marker_color=["#ff7f0e" if c in errors else "#d62728" for c in codes]))
    fig.update_layout(**LAYOUT, title=f"why attempts did not pass (first reason; {sum(counts.values())} of "
                      f"{len(attempts)}; red fail, orange error)", yaxis_title="attempts")
    return fig


def timed_rows(attempt: dict | None) -> list[dict]:
    return [r for r in (attempt or {}).get("shapes") or [] if r.get("median_us")]


def shapes_figure(best: dict | None) -> tuple[go.Figure, str]:
    """Per-shape speedups of the best against the reference and any peer times stored with its rows
    (``row['peers']``: name -> median µs, e.g. torch_compile). Returns the figure and a note."""
    rows = timed_rows(best)
    labels = [shape_label(r) for r in rows]
    fig = go.Figure(go.Bar(x=labels, y=[round(r.get("speedup") or 0.0, 4) for r in rows], name="vs reference",
                           meta="vs reference"))
    peers = sorted({p for r in rows for p in (r.get("peers") or {})})
    for peer in peers:
        fig.add_trace(go.Bar(x=labels, name=f"vs {peer}", meta=f"vs {peer}", y=[
            round(r["peers"][peer] / r["median_us"], 4) if (r.get("peers") or {}).get(peer) else None for r in rows]))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    note = ("" if peers else "torch.compile and peers: not measured in this ledger "
            "(benchmarks/suite.py --peers measures them)")
    fig.update_layout(**LAYOUT, barmode="group", yaxis_title="speedup", title=(
        f"the best (#{best['seq']}) per shape" if best else "no passing attempt kept yet"))
    return fig, note


def ceilings_for(best: dict | None, run: dict) -> tuple[dict | None, str]:
    """The roofline's ceilings: measured ones stored with the attempt, else the hardware sheet's leads."""
    stored = ((best or {}).get("extra") or {}).get("ceilings")
    if stored and stored.get("copy_tbps"):
        return stored, "measured ceilings stored with the attempt"
    from ratchet.hardware.sheets import find_sheet

    sheet = find_sheet(run.get("device_name"))
    if sheet and sheet.memory_bandwidth_tbps:
        return ({"copy_tbps": sheet.memory_bandwidth_tbps, "matmul_tflops": sheet.bf16_dense_tflops},
                f"datasheet leads for {sheet.name} (no measured ceilings stored)")
    return None, "no ceilings stored with the attempt and no datasheet for this device"


def roofline_figure(best: dict | None, run: dict) -> tuple[go.Figure, str]:
    """The best per shape: achieved TB/s and TFLOP/s against the ceilings (dashed lines, named in the
    legend). No text labels on the page: each one costs the browser a layout when it opens the report."""
    rows = timed_rows(best)
    ceilings, source = ceilings_for(best, run)
    labels = [shape_label(r) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bandwidth, TB/s", "compute, TFLOP/s"))
    fig.add_trace(go.Bar(x=labels, y=[r.get("achieved_tbps") for r in rows], name="achieved TB/s",
                         meta="tbps", marker_color="#1f77b4",
                         hovertext=[f"{100 * r['roofline_fraction']:.0f}% of the roofline floor"
                                    if r.get("roofline_fraction") else "" for r in rows]), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=[r.get("achieved_tflops") for r in rows], name="achieved TFLOP/s",
                         meta="tflops", marker_color="#ff7f0e"), row=1, col=2)
    for col, key, unit in ((1, "copy_tbps", "TB/s copy"), (2, "matmul_tflops", "TFLOP/s matmul")):
        if ceilings and ceilings.get(key) and labels:
            fig.add_trace(go.Scatter(x=[labels[0], labels[-1]], y=[ceilings[key]] * 2, mode="lines",
                                     name=f"ceiling {ceilings[key]:.4g} {unit}", meta=f"ceiling {key}",
                                     line=dict(dash="dash", color="#d62728")), row=1, col=col)
    fig.update_layout(**LAYOUT, title="the best on the roofline")
    fig.update_layout(legend=dict(orientation="h", y=-0.55), margin=dict(b=130), height=460)  # below the tilted ticks
    return fig, source


def lineage(attempts: list[dict], best: dict | None, history: list[dict]) -> list[dict]:
    """The best's ancestry: its parent chain (``parent_attempt``), then the earlier bests it replaced,
    oldest first, each attempt once."""
    by_id = {a["id"]: a for a in attempts}
    chain, seen, node = [], set(), best
    while node is not None and node["id"] not in seen:
        chain.append(node)
        seen.add(node["id"])
        node = by_id.get(node.get("parent_attempt"))
    for step in history:
        a = by_id.get(step["attempt_id"])
        if a is not None and a["id"] not in seen:
            chain.append(a)
            seen.add(a["id"])
    return sorted(chain, key=lambda a: a["seq"])


def lineage_figure(chain: list[dict], ideas: dict[int, str]) -> go.Figure:
    """Attempts of the lineage by seq and speedup, an arrow from each parent (or replaced best) to the next."""
    in_chain = {a["id"]: a for a in chain}
    ex, ey = [], []
    for prev, a in zip(chain, chain[1:]):
        parent = in_chain.get(a.get("parent_attempt"), prev)  # no recorded parent: the best it replaced
        ex += [parent["seq"], a["seq"], None]
        ey += [_y(parent), _y(a), None]
    fig = go.Figure(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#aaa"), hoverinfo="skip", name="from"))

    def text(a):
        idea = escape(ideas.get(a.get("idea_id")) or a.get("idea") or "")
        return f"{_hover(a)}<br>proposer {escape(str(a.get('proposer')))}" + (f"<br>idea: {idea[:80]}" if idea else "")

    fig.add_trace(go.Scatter(x=[a["seq"] for a in chain], y=[_y(a) for a in chain], mode="markers",
                             meta="lineage", name="attempt", hovertext=[text(a) for a in chain], hoverinfo="text",
                             marker=dict(size=11, color=[_COLORS[KEPT] if a.get("kept") else _COLORS[PASSED]
                                                         for a in chain])))
    fig.update_layout(**LAYOUT, title="lineage of the best (parents and the bests it replaced)",
                      xaxis_title="attempt", yaxis_title="speedup", showlegend=False)
    return fig


def knobs(attempts: list[dict]) -> list[str]:
    return sorted({k for a in attempts for k in (a.get("config") or {})})


def landscape_figure(attempts: list[dict]) -> go.Figure | None:
    """The tuner's landscape: per knob of the SPACE, the speedup of every passing config by that knob's
    value (one dot each), and per value one cross at 0 sized by how many configs did not pass (the count
    in ``customdata`` and the hover: hundreds of crosses on one spot would say less). None when no attempt
    had a config."""
    names = knobs(attempts)
    if not names:
        return None
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, subplot_titles=names)
    for col, knob in enumerate(names, start=1):
        mine = [a for a in attempts if knob in (a.get("config") or {})]
        values = sorted({str(a["config"][knob]) for a in mine}, key=_value_order)
        timed = [a for a in mine if a.get("speedup")]
        fig.add_trace(go.Scatter(
            x=[str(a["config"][knob]) for a in timed], y=[_y(a) for a in timed], mode="markers",
            meta=f"knob {knob}", name=knob, text=[f"#{a['seq']}" for a in timed], hoverinfo="text+y",
            marker=dict(size=6, opacity=0.6, color="#1f77b4", symbol=SYMBOL_TIMED)), row=1, col=col)
        untimed = Counter(str(a["config"][knob]) for a in mine if not a.get("speedup"))
        failed = [v for v in values if untimed[v]]
        most = max(untimed.values(), default=1)
        fig.add_trace(go.Scatter(
            x=failed, y=[0.0] * len(failed), customdata=[untimed[v] for v in failed], mode="markers",
            meta=f"knob {knob} not timed", name=f"{knob} not timed", hoverinfo="text",
            hovertext=[f"{knob}={v}: {untimed[v]} configs did not pass" for v in failed],
            marker=dict(size=[6 + 12 * (untimed[v] / most) ** 0.5 for v in failed], color="#d62728",
                        symbol=SYMBOL_UNTIMED)), row=1, col=col)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=values, row=1, col=col)
    fig.update_layout(**LAYOUT, title="the tuner's landscape: speedup by each knob's value (crosses at 0: configs that did not pass)",
                      showlegend=False)
    return fig


def _value_order(text: str) -> tuple:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


# -- a campaign ------------------------------------------------------------------------------------------

def gate_figure(gate: dict) -> go.Figure:
    """One gate's settings: the step's time ratio kernel / baseline per setting, green pass, red fail."""
    settings = gate.get("settings") or []
    labels = [f"{s.get('kind')} B={s.get('batch')} {'L' if s.get('kind') == 'decode' else 'S'}={s.get('length')}"
              for s in settings]
    fig = go.Figure(go.Bar(x=labels, y=[s.get("ratio") for s in settings], meta="gate",
                           marker_color=[{"pass": "#2ca02c", "fail": "#d62728"}.get(s.get("verdict"), "#999")
                                         for s in settings],
                           text=[s.get("verdict") + (f" ({s['reason']})" if s.get("reason") else "")
                                 for s in settings]))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    fig.update_layout(**LAYOUT, title=f"gate {gate.get('run')} on {gate.get('workload')} ({gate.get('size')}, "
                      f"{gate.get('device')}): {gate.get('verdict')}", yaxis_title="step time, kernel / baseline")
    return fig


def waterfall_figure(stack: dict) -> go.Figure:
    """The stacking waterfall: the eager step, then each layer's saving (negative: faster), then the total."""
    layers = stack.get("layers") or []
    if not layers:
        return go.Figure()
    names = [layers[0].get("name") or "eager"] + [l.get("name") for l in layers[1:]] + ["stacked"]
    first = layers[0].get("step_us") or 0.0
    deltas = [-(l.get("saved_us") or 0.0) for l in layers[1:]]
    final = first + sum(deltas)
    # Floating bars (a bar trace with bases), so the report needs only plotly.js's basic bundle: each saving
    # hangs from the step time left before it, the total stands on zero.
    bases = [0.0] + [first + sum(deltas[:i]) for i in range(len(deltas))] + [0.0]
    fig = go.Figure(go.Bar(x=names, y=[first, *deltas, final], base=bases, meta="waterfall",
                           marker_color=["#1f77b4"] + ["#2ca02c" if d <= 0 else "#d62728" for d in deltas] + ["#1f77b4"],
                           text=[f"{first:.0f} µs"] + [f"{d:+.0f} µs" for d in deltas] + [f"{final:.0f} µs"]))
    fig.update_layout(**LAYOUT, yaxis_title="step µs", title=(
        f"stacking on {stack.get('workload')} B={stack.get('batch')} context {stack.get('context')}"))
    return fig


def amdahl_rows(campaign: dict, runs: list[dict]) -> list[dict[str, Any]]:
    """One row per op: its share of the step (from the campaign's profile where stored), its run, the run's
    best speedup, and Amdahl's step speedup from that op alone: 1 / ((1 - share) + share / speedup)."""
    shares: dict[str, float] = {}
    profile = campaign.get("profile") or {}
    for entry in profile.get("worth_a_run") or []:
        share = (entry.get("shares") or {}).get("decode")
        if entry.get("task") and share is not None:
            shares[entry["task"]] = float(share)
    rows = []
    for r in runs:
        share, best = shares.get(r["task"]), r.get("best_speedup")
        bound = 1.0 / ((1 - share) + share / best) if share is not None and best else None
        rows.append({"task": r["task"], "run": r["id"], "share": share, "best_speedup": best,
                     "step_speedup": bound, "attempts": r.get("attempts"), "status": r.get("status")})
    return rows


def find_stacks(value: Any) -> list[dict]:
    """Every stacking result (a dict with ``layers``) inside a campaign's stored fields."""
    if isinstance(value, dict):
        if isinstance(value.get("layers"), list) and value.get("workload"):
            return [value]
        return [s for v in value.values() for s in find_stacks(v)]
    if isinstance(value, list):
        return [s for v in value for s in find_stacks(v)]
    return []
