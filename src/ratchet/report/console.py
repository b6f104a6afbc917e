"""A verdict as a Rich table, for people; ``--json`` is for programs."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ratchet.diagnose.bottleneck import COUNTER_RULE, RULE, classify_row_with_counters, labelled
from ratchet.judge.verdict import Verdict

_COLOR = {"pass": "green", "fail": "red", "error": "yellow"}


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_verdict(verdict: Verdict, console: Console | None = None, counters: dict | None = None):
    """``counters``: ncu's (``NcuResult.to_json()``) for one shape, shown next to that row's class."""
    console = console or Console()
    color = _COLOR.get(verdict.verdict, "white")
    speed = f"  speedup {verdict.speedup:.3f}x (weighted geometric mean)" if verdict.speedup else ""
    console.print(f"[bold {color}]{verdict.verdict.upper()}[/]  {verdict.task}  {verdict.candidate}{speed}")
    for reason in verdict.reasons:
        console.print(f"  [{color}]{reason.code}[/]: {reason.detail}")
    timed = [s for s in verdict.shapes if s.median_us is not None]
    if timed:
        table = Table(title=f"{verdict.device_name or verdict.device}, config {verdict.config or '{}'}")
        for col in ("shape", "dtype", "mode", "median us", "IQR us", "ref us", "speedup", "TB/s", "roofline", "class"):
            table.add_column(col, justify="right" if col not in ("shape", "dtype", "mode", "class") else "left")
        for s in timed:
            table.add_row(" ".join(f"{k}={v}" for k, v in s.shape.items()), s.dtype, s.mode,
                          _fmt(s.median_us, ".2f"), _fmt(s.iqr_us, ".2f"), _fmt(s.ref_median_us, ".2f"),
                          _fmt(s.speedup, ".3f"), _fmt(s.achieved_tbps, ".3f"),
                          _fmt(s.roofline_fraction and 100 * s.roofline_fraction, ".1f") + "%",
                          escape(labelled(*classify_row_with_counters(asdict(s), verdict.ceilings, counters))))
        console.print(table)
    if counters:
        console.print(escape(counters_line(counters)), soft_wrap=True)
    held = [s for s in verdict.shapes if s.held_out]
    if held:
        console.print(f"  held-out shapes checked: {', '.join(str(s.shape) for s in held)}")
    for note in verdict.notes:
        console.print(f"  note: {note}")
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in verdict.phases_s.items())
    host = verdict.judge_host_s
    if host:
        # The first call's launch by the worker's clock (a compile is in it): ledgers from before it lack it.
        launch = host.get("first_launch", 0.0) + host.get("first_profiled", 0.0)
        profiled = ", under the profiler" if host.get("first_profiled") else ""
        phases += (f"; correctness: first call {host['first_call']:.1f} s (its launch {launch:.1f} s{profiled}), "
                   f"other calls {host['calls']:.1f} s, "
                   f"checks {host['checks']:.1f} s; judge thread CPU {host['cpu']:.1f} s, "
                   f"waiting for the GPU {host['gpu_wait']:.1f} s")
    console.print(f"  judge wall time {verdict.judge_wall_s:.1f} s" + (f" ({phases})" if phases else ""))
    if verdict.timed_calls:
        parts = ", ".join(f"{part} {us:.0f}" for part, us in verdict.timed_calls["mean_us"].items())
        console.print(f"  {verdict.timed_calls['calls']} timed calls, mean us per call: {parts}", soft_wrap=True)


def print_run(run: dict, attempts: list[dict], history: list[dict], ideas: list[dict] = (),
              console: Console | None = None):
    console = console or Console()
    best = f"{run['best_speedup']:.3f}x" if run.get("best_speedup") else "-"
    console.print(f"[bold]{run['id']}[/] {run['task']} on {run['device']} ({run['device_name']}): {run['status']}"
                  f"{' - ' + run['stop_reason'] if run.get('stop_reason') else ''}; {len(attempts)} attempts, best {best}")
    table = Table()
    for col in ("#", "candidate", "config", "verdict", "speedup", "kept", "reason", "judge s"):
        table.add_column(col)
    for a in attempts:
        reason = f"{a['reasons'][0]['code']}: {a['reasons'][0]['detail'][:60]}" if a["reasons"] else ""
        table.add_row(str(a["seq"]), a["candidate_path"].rsplit("/", 1)[-1], str(a["config"]), a["verdict"],
                      _fmt(a["speedup"], ".3f"), "yes" if a["kept"] else "", reason, _fmt(a["judge_wall_s"], ".1f"))
    console.print(table)
    if history:
        steps = " -> ".join(f"#{next((a['seq'] for a in attempts if a['id'] == h['attempt_id']), '?')}" for h in history)
        console.print(f"best history: {steps}")
    best = next((a for a in attempts if history and a["id"] == history[-1]["attempt_id"]), None)
    rows = best_bottlenecks(best) if best else []
    if rows:
        table = Table(title=f"best (#{best['seq']}) per shape: what limits it ({RULE})")
        for col in ("shape", "dtype", "mode", "median us", "floor us", "roofline", "class"):
            table.add_column(col, justify="left" if col in ("shape", "dtype", "mode", "class") else "right")
        for r in rows:
            table.add_row(" ".join(f"{k}={v}" for k, v in r["shape"].items()), r["dtype"], r["mode"] or "-",
                          _fmt(r["median_us"], ".2f"), _fmt(r["floor_us"], ".2f"),
                          _fmt(r["roofline_fraction"] and 100 * r["roofline_fraction"], ".1f") + "%",
                          escape(labelled(r["class"], r["counters"])))
        console.print(table)
    profiled = [a for a in attempts if (a.get("extra") or {}).get("counters")]
    if profiled:
        console.print(escape(f"hardware counters by attempt (ncu, one profiled call each, not the judge's; "
                             f"{COUNTER_RULE}):"), soft_wrap=True)
        for a in profiled:
            console.print(escape(f"  #{a['seq']} {counters_line(a['extra']['counters'], a)}"), soft_wrap=True)
    if ideas:
        console.print(f"ideas for {run['task']}:")
        for i in ideas:
            outcome = (f"{i['attempts']} attempts, {i['passed']} passed, {i['kept']} kept"
                       + (f", best {i['best_speedup']:.3f}x" if i["best_speedup"] else ""))
            line = f"  {i['id']}. ({i['status']}) {i['text']} ({i['author']}): {outcome}"
            console.print(escape(line), soft_wrap=True)  # people's text is not Rich markup


def best_bottlenecks(attempt: dict) -> list[dict]:
    """The timed rows of an attempt, each with its bottleneck class (``ratchet.diagnose.bottleneck``)."""
    extra = attempt.get("extra") or {}
    rows = []
    for r in attempt.get("shapes") or []:
        if r.get("median_us"):
            klass, note = classify_row_with_counters(r, extra.get("ceilings"), extra.get("counters"))
            rows.append({"shape": r["shape"], "dtype": r["dtype"], "mode": r.get("mode"), "median_us": r.get("median_us"),
                         "floor_us": r.get("floor_us"), "roofline_fraction": r.get("roofline_fraction"),
                         "class": klass, "counters": note})
    return rows


def counters_line(counters: dict, attempt: dict | None = None) -> str:
    """One line on ncu's counters: the class they give on the profiled shape, or why there are none.
    ``attempt`` (a ledger row) supplies the judged row for the class; without it (``ratchet eval``) the
    caller's table already shows the class."""
    where = " ".join(f"{k}={v}" for k, v in (counters.get("shape") or {}).items())
    where = f"{where} {counters.get('dtype') or ''}".strip()
    if not counters.get("available"):
        return f"ncu counters not read ({counters.get('why') or 'unknown reason'})"
    if attempt is None:
        return f"counters from ncu on {where} (one profiled call, not the judge's; {COUNTER_RULE})"
    extra = attempt.get("extra") or {}
    for row in attempt.get("shapes") or []:
        if row.get("median_us"):
            klass, note = classify_row_with_counters(row, extra.get("ceilings"), counters)
            if note:
                return f"{labelled(klass, note)} on {where}"
    from ratchet.diagnose.ncu import describe

    return f"{describe(counters.get('summary'))} on {where} (no judged row of that shape)"
