"""A verdict as a Rich table, for people; ``--json`` is for programs."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ratchet.diagnose.bottleneck import COUNTER_RULE, RULE, classify_row_with_counters, labelled
from ratchet.judge.verdict import Verdict
from ratchet.report.terminal import make_console, show

_COLOR = {"pass": "green", "fail": "red", "error": "yellow"}


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_verdict(verdict: Verdict, console: Console | None = None, counters: dict | None = None):
    """``counters``: ncu's (``NcuResult.to_json()``) for one shape, shown next to that row's class."""
    console = console or make_console()
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
        show(console, table)
    if counters:
        console.print(escape(counters_line(counters)), soft_wrap=True)
    if verdict.verdict == "pass":
        held = [s for s in verdict.shapes if s.held_out]
        if held:
            console.print(f"  held-out shapes checked: {', '.join(str(s.shape) for s in held)}")
    else:
        for line in checked_before_failure(verdict.to_json()):
            console.print(f"  {escape(line)}")
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
    console = console or make_console()
    best = f"{run['best_speedup']:.3f}x" if run.get("best_speedup") else "-"
    console.print(f"[bold]{run['id']}[/] {run['task']} on {run['device']} ({run['device_name']}): {run['status']}"
                  f"{' - ' + run['stop_reason'] if run.get('stop_reason') else ''}; {len(attempts)} attempts, best {best}")
    table = Table()
    for col in ("#", "candidate", "config", "verdict", "speedup", "kept", "reason", "judge s"):
        table.add_column(col)
    for a in attempts:
        # A failure's first reason; a pass's keep decision (why a faster attempt was not kept, or why it was).
        reason = (f"{a['reasons'][0]['code']}: {a['reasons'][0]['detail'][:200]}" if a["reasons"]
                  else a.get("keep_reason") or "")
        table.add_row(str(a["seq"]), a["candidate_path"].rsplit("/", 1)[-1], str(a["config"]), a["verdict"],
                      _fmt(a["speedup"], ".3f"), "yes" if a["kept"] else "", escape(reason), _fmt(a["judge_wall_s"], ".1f"))
    show(console, table)
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
        show(console, table)
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


def outcome_counts(attempts: list[dict]) -> dict:
    """Attempts by outcome: kept (at some point the best), passed, failed and errors by their first reason."""
    failed, errors = Counter(), Counter()
    for a in attempts:
        code = a["reasons"][0]["code"] if a["reasons"] else "no reason"
        if a["verdict"] == "fail":
            failed[code] += 1
        elif a["verdict"] == "error":
            errors[code] += 1
    return {"attempts": len(attempts), "kept": sum(1 for a in attempts if a["kept"]),
            "passed": sum(1 for a in attempts if a["verdict"] == "pass"),
            "failed": dict(failed.most_common()), "errors": dict(errors.most_common())}


def print_run_summary(run: dict, attempts: list[dict], best: dict | None, elapsed_s: float,
                      console: Console | None = None) -> dict:
    """The end of a run: attempts by outcome, the time taken, and the best's speedup per shape with what it
    is measured against. Returns the counts shown (``outcome_counts``)."""
    console = console or make_console()
    counts = outcome_counts(attempts)
    by = lambda found: ", ".join(f"{code} {n}" for code, n in found.items()) or "none"  # noqa: E731
    judged = sum(a["judge_wall_s"] or 0.0 for a in attempts)
    console.print(f"[bold]run {run['id']} summary[/]: {counts['attempts']} attempts in {elapsed_s:.0f} s "
                  f"(judging {judged:.0f} s): {counts['kept']} kept, {counts['passed']} passed, "
                  f"{sum(counts['failed'].values())} failed ({by(counts['failed'])}), "
                  f"{sum(counts['errors'].values())} errors ({by(counts['errors'])})", highlight=False)
    rows = [r for r in (best or {}).get("shapes") or [] if r.get("speedup") is not None and not r.get("held_out")]
    if not rows:
        console.print("  no passing attempt: no speedup to show", highlight=False)
        return counts
    console.print(escape(f"  best: #{best['seq']} {best['candidate_path'].rsplit('/', 1)[-1]} {best['config']}, "
                         f"{best['speedup']:.3f}x over its shapes (weighted geometric mean)"), highlight=False)
    table = Table()
    for col in ("shape", "dtype", "mode", "median us", "reference us", "speedup"):
        table.add_column(col, justify="left" if col in ("shape", "dtype", "mode") else "right")
    for r in rows:
        table.add_row(" ".join(f"{k}={v}" for k, v in r["shape"].items()), r["dtype"], r.get("mode") or "-",
                      _fmt(r.get("median_us"), ".2f"), _fmt(r.get("ref_median_us"), ".2f"), f"{r['speedup']:.3f}x")
    show(console, table)
    console.print(f"  speedup = the task's reference ({run['task']}'s reference function in eager PyTorch, timed "
                  f"interleaved with the kernel in the same evaluation) / the kernel, per shape, on "
                  f"{run['device_name'] or run['device']}", highlight=False, soft_wrap=True)
    return counts


def row_label(row: dict) -> str:
    """One judged shape of a verdict's JSON as a phrase: "held-out B=9 S=2 bfloat16"."""
    held = "held-out " if row.get("held_out") else ""
    shape = " ".join(f"{k}={v}" for k, v in row["shape"].items())
    return f"{held}{shape} {row.get('dtype') or ''}".strip()


def checked_before_failure(verdict: dict) -> list[str]:
    """For a verdict that is not a pass: the shapes found right before it ended, and the one it failed at."""
    rows = verdict.get("shapes") or []
    right = [row_label(r) for r in rows if r.get("correct", True)]
    wrong = [row_label(r) for r in rows if not r.get("correct", True)]
    lines = []
    if right:
        lines.append(f"shapes found right before it ended: {', '.join(right)}")
    if wrong:
        lines.append(f"failed at: {', '.join(wrong)}")
    return lines


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
