"""The brief: the markdown an agent (a coding agent, the LLM proposer, an MCP client) works from.

``build_brief(task, ledger, run_id, device, max_chars)`` gathers what is known about a task on one kind
of device and writes it as markdown, in sections ordered by priority, most informative first:

1. Goal: beat the reference and the current best (speedups), per-shape roofline targets.
2. Hardware: the device's sheet (datasheet leads) and the ceilings the judge measured.
3. Task: description, kernel signature, dtypes and correctness rule, reference and cost-model source.
4. Best candidate: its source, verdict, per-shape figures and bottleneck class (or, with no history yet,
   the task's seeds as starting points).
5. History: attempts grouped by candidate (source hash), why they failed, dead ends.
6. Pending ideas.
7. Rules: the candidate file format, the task's forbidden ops, the judge's refusal codes.

The brief is bounded by ``max_chars``. Over the bound, sections are shortened lowest priority first
(history keeps its kept and most recent candidates, sources are cut with a marker), in two rounds: first
each down to a moderate level, then one step at a time each, toward its floor; then shortened sections
grow back, highest priority first, while the bound allows. The floors keep the
goal, the best candidate's essentials (signature, config, speedup, per-shape figures, the head of its
source) and the rules; only a bound too small even for those cuts the text itself, with a marker.

It reads only: it never measures, never writes the ledger, never imports candidate code.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from ratchet.agents import judge_facts
from ratchet.judge.verdict import ERROR_CODES, FAIL_CODES

from ratchet.diagnose.bottleneck import (COUNTER_RULE, OVERHEAD_FACTOR, OVERHEAD_TINY_US, classify, classify_with_counters,
                                 counters_for_row, labelled)
from ratchet.diagnose.ncu import describe as describe_counters

if TYPE_CHECKING:
    from ratchet.run.ledger import Ledger
    from ratchet.task import Task

from ratchet.agents import DEFAULT_MAX_CHARS  # noqa: E402 - re-exported

ROOFLINE_SLACK = 0.15  # the judge refuses times more than this fraction under the floor (beyond_roofline)


class BriefError(ValueError):
    """The brief cannot be built from what was asked (a run of another task, a bad bound); one line."""


# -- facts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roof:
    """The ceilings the floors come from: measured ones when cached, else the datasheet's."""

    copy_tbps: float | None
    matmul_tflops: float | None
    basis: str  # one line saying where the numbers come from

    def floor_us(self, nbytes: float, flops: float) -> float | None:
        if not self.copy_tbps:
            return None
        floor = nbytes / (self.copy_tbps * 1e12)
        if self.matmul_tflops:
            floor = max(floor, flops / (self.matmul_tflops * 1e12))
        return floor * 1e6

    @property
    def ridge(self) -> float | None:
        """FLOPs per byte at which the compute and memory ceilings meet."""
        if not (self.copy_tbps and self.matmul_tflops):
            return None
        return self.matmul_tflops / self.copy_tbps


@dataclass
class _Facts:
    task: Task
    device: str
    device_name: str | None
    roof: Roof
    ceilings: dict | None
    run: dict | None = None
    attempts: list[dict] = field(default_factory=list)
    best: dict | None = None
    best_history: list[dict] = field(default_factory=list)
    ideas: list[dict] = field(default_factory=list)
    other_device_runs: int = 0
    ref_times: dict = field(default_factory=dict)  # (shape key, dtype) -> (median µs, mode, date)
    ledger_arg: str = ""  # " --ledger PATH" where the ledger read is not the default one: commands carry it


def build_brief(task: Task, ledger: Ledger | None = None, run_id: str | None = None, device: str | None = None,
                max_chars: int = DEFAULT_MAX_CHARS, device_name: str | None = None) -> str:
    """The markdown brief for ``task``: from run ``run_id`` if given, else the task's most recent run in
    ``ledger`` (on ``device`` when one is given), else "no history yet" with the task's seeds.

    ``device`` is "cpu" or "cuda"; by default the run's device, else cuda where one is present.
    ``device_name`` names the GPU a cuda brief is for when none is here ("NVIDIA H200"): its sheet,
    cached ceilings and measured reference times are used; a run's own device name wins. Raises
    ``BriefError`` for a bad bound or a run that does not fit the task or device, and the ledger's
    ``LedgerError`` for an unknown run.
    """
    if not isinstance(max_chars, int) or max_chars <= 0:
        raise BriefError(f"the brief's bound must be a positive number of characters, not {max_chars!r}")
    if device not in (None, "cpu", "cuda"):
        raise BriefError(f"device must be cpu or cuda, not {device!r}")
    facts = _gather(task, ledger, run_id, device, device_name)
    sections = [
        _Section("goal", _goal_levels(facts), soft=0),
        _Section("hardware", _hardware_levels(facts), soft=1),
        _Section("task", _task_levels(facts), soft=1),
        _Section("best", _best_levels(facts), soft=3),
        _Section("history", _history_levels(facts), soft=3),
        _Section("ideas", _ideas_levels(facts), soft=2),
        _Section("rules", _rules_levels(facts), soft=1),
    ]
    return _fit(_header(facts), sections, max_chars)


def _gather(task: Task, ledger: Ledger | None, run_id: str | None, device: str | None,
            device_name: str | None = None) -> _Facts:
    run = None
    other_device_runs = 0
    if run_id is not None:
        if ledger is None:
            raise BriefError(f"run '{run_id}' asked for, but there is no ledger to read it from")
        run = ledger.get_run(run_id)  # LedgerError for an unknown run
        if run["task"] != task.name:
            raise BriefError(f"run '{run_id}' is a run of task '{run['task']}', not '{task.name}'")
        if device is not None and run["device"] != device:
            raise BriefError(f"run '{run_id}' was judged on {run['device']}, not {device}")
    elif ledger is not None:
        runs = [r for r in ledger.list_runs() if r["task"] == task.name]
        fitting = [r for r in runs if (device is None or r["device"] == device)
                   and (device_name is None or r["device_name"] == device_name)]
        other_device_runs = len(runs) - len(fitting)
        run = fitting[-1] if fitting else None  # list_runs is oldest first
    if device is None:
        device = run["device"] if run else ("cuda" if torch.cuda.is_available() else "cpu")
    device_name = run["device_name"] if run else (device_name or _local_device_name(device))
    ceilings = _cached_ceilings(device, device_name)
    facts = _Facts(task=task, device=device, device_name=device_name, roof=_roof(device, device_name, ceilings),
                   ceilings=ceilings, run=run, other_device_runs=other_device_runs,
                   ref_times=_reference_times(ledger, task.name, device, device_name) if ledger else {})
    if ledger is not None:
        facts.ledger_arg = _ledger_arg(ledger)
        facts.ideas = ledger.ideas(task.name)
    if run is not None:
        facts.attempts = ledger.attempts(run["id"])
        facts.best = ledger.best(run["id"])
        facts.best_history = ledger.best_history(run["id"])
        texts = {i["id"]: i["text"] for i in facts.ideas}
        for a in facts.attempts + ([facts.best] if facts.best else []):
            if not a.get("idea") and a.get("idea_id") in texts:
                a["idea"] = texts[a["idea_id"]]  # name the idea, not just its number
    return facts


def _local_device_name(device: str) -> str | None:
    if device == "cuda":
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    from ratchet.hardware.detect import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} cores"


def _cached_ceilings(device: str, device_name: str | None) -> dict | None:
    """The ceilings the judge measured and cached for this device; never measures."""
    from ratchet.hardware.detect import cached_ceilings

    if device == "cuda":
        return cached_ceilings(device_name, None) if device_name else None
    from ratchet.hardware.ceilings import device_identity

    return cached_ceilings(*device_identity("cpu"))


def _reference_times(ledger: Ledger, task_name: str, device: str, device_name: str | None) -> dict:
    """The reference's medians the judge measured for this task on this device (same device name), from
    every run's attempts, the newest measurement of each shape and dtype winning."""
    found: dict = {}
    for run in ledger.list_runs():
        if run["task"] != task_name or run["device"] != device or run["device_name"] != device_name:
            continue
        for attempt in ledger.attempts(run["id"]):
            for row in attempt.get("shapes") or []:
                if row.get("ref_median_us") is not None and not row.get("held_out"):
                    key = (tuple(sorted(row["shape"].items())), str(row["dtype"]).removeprefix("torch."))
                    found[key] = (row["ref_median_us"], row.get("mode") or "eager", attempt["created_at"][:10])
    return found


def _roof(device: str, device_name: str | None, ceilings: dict | None) -> Roof:
    if ceilings and ceilings.get("copy_tbps"):
        return Roof(ceilings["copy_tbps"], ceilings.get("matmul_tflops"),
                    f"measured ceilings of {ceilings.get('device_name', device_name)} (cached "
                    f"{ceilings.get('measured_at', '?')}): copy {ceilings['copy_tbps']:.3g} TB/s, matmul "
                    f"{_num(ceilings.get('matmul_tflops'))} TFLOP/s; these are the judge's floors")
    if device == "cpu":
        return Roof(None, None, "CPU: no measured ceilings cached on this machine, so no floors (the judge "
                    "measures them at its first evaluation); CPU times say nothing about GPU speed")
    from ratchet.hardware.sheets import find_sheet

    sheet = find_sheet(device_name)
    if sheet and sheet.memory_bandwidth_tbps:
        return Roof(sheet.memory_bandwidth_tbps, sheet.bf16_dense_tflops,
                    f"datasheet numbers for {sheet.name} ({sheet.memory_bandwidth_tbps} TB/s, "
                    f"{_num(sheet.bf16_dense_tflops)} bf16 TFLOP/s), not measured: no ceilings are cached "
                    "here; the judge's floors use measured ceilings, which sit below datasheet peaks")
    return Roof(None, None, f"no measured ceilings and no datasheet for {device_name or 'this GPU (not detected here)'}"
                ": floors unknown")


def device_targets(task: Task, ledger: Ledger | None, device: str, device_name: str | None = None) -> str:
    """The hardware lines (datasheet leads and measured ceilings, each named as such) and the Goal's
    per-shape table (floors, measured reference times) for ``device``: what ``program.md`` shows."""
    facts = _gather(task, ledger, None, device, device_name)
    return _hardware(facts, 1).removeprefix("## Hardware\n\n") + "\n\n" + "\n".join(_targets(facts, False))


# -- sections and fitting -------------------------------------------------------------------------------

Level = Callable[[], str]


@dataclass
class _Section:
    """A section's renderings from richest to shortest; trimming moves ``level`` toward the last one,
    which is the section's floor (what is always kept). ``soft`` is the level a first round of trimming
    stops at, so that one section is not cut to its floor while a higher one keeps all its detail."""

    name: str
    levels: list[Level]
    soft: int = 0
    level: int = 0
    _texts: dict[int, str] = field(default_factory=dict)

    def text(self) -> str:
        if self.level not in self._texts:
            self._texts[self.level] = self.levels[self.level]().strip() + "\n"
        return self._texts[self.level]

    @property
    def floor(self) -> int:
        return len(self.levels) - 1


def _fit(header: str, sections: list[_Section], max_chars: int) -> str:
    def join() -> str:
        return header + "".join("\n" + s.text() for s in sections)

    def total() -> int:
        return len(header) + sum(1 + len(s.text()) for s in sections)

    for section in reversed(sections):  # round 1: lowest priority first, each down to its soft level
        while total() > max_chars and section.level < min(section.soft, section.floor):
            section.level += 1
    while total() > max_chars:  # round 2: one step each, lowest priority first, until it fits or all are at floor
        movable = [s for s in reversed(sections) if s.level < s.floor]
        if not movable:
            break
        for section in movable:
            section.level += 1
            if total() <= max_chars:
                break
    for section in sections:  # grow back what a big step over-trimmed, highest priority first
        while section.level > 0:
            section.level -= 1
            if total() > max_chars:
                section.level += 1
                break
    text = join()
    if len(text) > max_chars:  # even the floors do not fit: cut the text itself, visibly
        marker = f"\n[brief cut at {max_chars} characters; ask for a larger bound]\n"
        text = text[: max(0, max_chars - len(marker))] + marker
        text = text[:max_chars]
    return text


def _header(f: _Facts) -> str:
    where = f"{f.device}" + (f" ({f.device_name})" if f.device_name else "")
    if f.run:
        src = (f"History from run {f.run['id']} ({f.run['status']}, {len(f.attempts)} attempts, proposer "
               f"{f.run['proposer']}, started {f.run['created_at'][:16]}).")
    else:
        src = "No history yet: no run of this task" + (f" on {f.device}" if f.other_device_runs else "") + " in the ledger."
    return f"# Ratchet brief: {f.task.name} on {where}\n\n{src}\n"


# -- 1. goal --------------------------------------------------------------------------------------------


def _goal_levels(f: _Facts) -> list[Level]:
    return [lambda: _goal(f, True), lambda: _goal(f, False)]


def _goal(f: _Facts, full: bool) -> str:
    sig = kernel_signature(f.task)
    lines = ["## Goal", "",
             f"Make `{sig}` for **{f.task.name}** faster on **{f.device}** than the task's reference and than the "
             "current best, with every check of the judge passing.", "",
             "- Reference: 1.00x by definition (timed interleaved with the candidate in the same evaluation)."]
    if f.best:
        lines.append(f"- Current best: **{f.best['speedup']:.3f}x** over the reference (weighted geometric mean over "
                     f"shapes and dtypes; attempt #{f.best['seq']} of run {f.best['run_id']}, "
                     f"`{_basename(f.best['candidate_path'])}`, config `{_config(f.best['config'])}`). To be kept, a "
                     "candidate must beat it beyond the measured noise and be slower on no shape.")
    else:
        lines.append("- Current best: none yet. The first candidate that passes becomes the best; then beat it.")
    if f.run and f.run.get("goal_speedup"):
        lines.append(f"- Run target: {f.run['goal_speedup']:g}x.")
    lines += ["", *_targets(f, full)]
    return "\n".join(lines)


def _targets(f: _Facts, full: bool) -> list[str]:
    """The per-shape table of the device's shape set: weight, roofline floor and the reference's measured
    time per dtype, with where the floors and times come from."""
    shapes = list(f.task.shape_set(f.device).public)
    dtypes = list(f.task.dtypes)
    lines = [f"Roofline targets per public shape ({f.device} shape set"
             + (f", {f.device_name}" if f.device == "cuda" and f.device_name else "") + f"). Floors: {f.roof.basis}. "
             "floor = max(bytes / copy bandwidth, FLOPs / matmul rate); a time more than "
             f"{ROOFLINE_SLACK:.0%} under the judge's floor is refused (`beyond_roofline`).", ""]
    names = [_dtype_name(d) for d in dtypes]
    head = ["shape", "weight"] + [f"floor µs {n}" for n in names] + [f"ref µs {n}" for n in names]
    if full:
        head += [f"AI FLOP/B ({names[0]})", "class"]
    lines += [_row(head), _row(["---"] * len(head))]
    dates = set()
    for shape in shapes:
        row = [_shape(shape), f"{f.task.shape_weight(shape):g}"]
        for dtype in dtypes:
            cost = f.task.shape_cost(shape, dtype)
            row.append(_us(f.roof.floor_us(cost.bytes, cost.flops)) if cost else "-")
        for dtype in dtypes:
            measured = f.ref_times.get((tuple(sorted(shape.items())), _long_dtype(dtype)))
            if measured:
                dates.add(measured[2])
                row.append(f"{_us(measured[0])} ({measured[1]})")
            else:
                row.append("-")
        if full:
            cost = f.task.shape_cost(shape, dtypes[0])
            ai = cost.flops / cost.bytes if cost and cost.bytes and not _is_kernelbench(f.task) else None
            row += [_num(ai), _bottleneck(cost, f.roof, flops_known=not _is_kernelbench(f.task)) if cost else "-"]
        lines.append(_row(row))
    where = f.device_name or f.device
    if dates:
        lines += ["", f"ref µs: the reference's median as the judge measured it on {where} (ledger, "
                  f"{min(dates)} to {max(dates)}; `graph` = CUDA-graph replay); '-': that shape not measured yet."]
    else:
        lines += ["", f"ref µs: not measured on this device yet (no judged attempt of {f.task.name} on {where} in "
                  "the ledger); the first evaluation measures the reference beside your kernel."]
    if full:
        ridge = f.roof.ridge
        at = f" = {ridge:.3g} FLOP/B" if ridge else ", unknown here; AI under 1 is memory-bound anywhere"
        lines += ["", f"Class rule: arithmetic intensity AI = FLOPs / bytes against the ridge point (matmul rate / "
                  f"copy bandwidth{at}): below it memory-bound, at or above it compute-bound. A measured time over "
                  f"{OVERHEAD_FACTOR:g}x its floor where the floor is under {OVERHEAD_TINY_US:g} µs is overhead-bound "
                  "(launch, reduction and synchronisation cost, not bytes, dominate)."]
    return lines


def _bottleneck(cost, roof: Roof, median_us: float | None = None, floor_us: float | None = None,
                flops_known: bool = True) -> str:
    """``ratchet.diagnose.bottleneck``'s rule on the task's cost model and this brief's ceilings."""
    if floor_us is None and cost is not None:
        floor_us = roof.floor_us(cost.bytes, cost.flops)
    return classify(cost.flops if cost is not None and flops_known else None,
                    cost.bytes if cost is not None else None, roof.ridge, median_us, floor_us)


# -- 2. hardware ----------------------------------------------------------------------------------------


def _hardware_levels(f: _Facts) -> list[Level]:
    return [lambda: _hardware(f, 2), lambda: _hardware(f, 1), lambda: _hardware(f, 0)]


def _hardware(f: _Facts, detail: int) -> str:
    lines = ["## Hardware", ""]
    if f.device == "cpu":
        lines.append(f"CPU: {f.device_name or 'unknown'}. The judge uses the task's CPU shape set; CPU times say "
                     "nothing about GPU speed.")
    else:
        from ratchet.hardware.sheets import find_sheet

        sheet = find_sheet(f.device_name)
        if sheet is None:
            lines.append(f"GPU: {f.device_name or 'not detected here'}; no datasheet sheet for it.")
        else:
            s = sheet
            lines.append(
                f"{s.vendor} {s.name} ({s.architecture}, compute capability {s.compute_capability}): {_num(s.sms)} SMs, "
                f"{_num(s.memory_gb)} GB at {_num(s.memory_bandwidth_tbps)} TB/s, L2 {_num(s.l2_mib)} MiB, "
                f"{_num(s.shared_memory_per_sm_kib)} KiB shared memory per SM, {_num(s.registers_per_sm)} registers per "
                f"SM, warp {s.warp_size}; tensor cores: {s.tensor_core_family}; TMA {_yes(s.tma)}, clusters "
                f"{_yes(s.clusters)}, FP8 {_yes(s.fp8)}, FP4 {_yes(s.fp4)}; bf16 dense {_num(s.bf16_dense_tflops)} "
                "TFLOP/s. Datasheet leads, not measurements.")
            if detail >= 2:
                lines += [f"- {note}" for note in s.notes]
    if detail >= 1:
        c = f.ceilings
        lines.append(f"Measured ceilings (cached, {c.get('measured_at', '?')}): copy {c['copy_tbps']:.3g} TB/s, matmul "
                     f"{_num(c.get('matmul_tflops'))} TFLOP/s ({c.get('method', '')})." if c and c.get("copy_tbps")
                     else "Measured ceilings: none cached for this device (`ratchet hw` shows them once the judge "
                     "has measured).")
    software = next((a["extra"]["software"] for a in reversed(f.attempts) if (a.get("extra") or {}).get("software")),
                    None)
    if software:  # what the judge runs, which an agent on another machine cannot see
        names = sorted(software, key=lambda n: (("torch", "triton", "cuda") + (n,)).index(n))
        lines.append("The run's judge: " + ", ".join(f"{n} {software[n]}" for n in names) + ".")
    return "\n".join(lines)


# -- 3. task --------------------------------------------------------------------------------------------


def _task_levels(f: _Facts) -> list[Level]:
    return [lambda: _task(f, None, True), lambda: _task(f, None, False), lambda: _task(f, 40, False),
            lambda: _task(f, 15, False)]


def _task(f: _Facts, max_lines: int | None, with_inputs: bool) -> str:
    t = f.task
    lines = ["## Task", ""]
    if t.description:
        lines += [t.description, ""]
    lines.append(f"- Signature: `{kernel_signature(t)}`; returns what the reference returns.")
    lines.append(f"- Dtypes: {', '.join(_dtype_name(d) for d in t.dtypes)}; every dtype is judged on every shape.")
    lines.append(f"- Correctness: {_check_rule(t)}")
    held = t.shape_set(f.device).held_out
    if held is not None:
        dims = ", ".join(f"{k} in {list(v) if not _is_range(v) else f'[{v[0]}, {v[1]}]'}" for k, v in held.dims.items())
        lines.append(f"- Held-out shapes: {held.count} drawn at every evaluation from {dims}"
                     f"{' (odd values from ranges)' if held.odd else ''}; checked for correctness, not timed.")
    lines.append("- Shapes, weights and floors: see the Goal's table; the overall speedup is their weighted "
                 "geometric mean.")
    if t.source_path:
        lines.append(f"- Task file: {t.source_path}")
    ref = reference_text(t)
    if ref is None and t.source_path and Path(t.source_path).is_file():
        ref = Path(t.source_path).read_text()  # e.g. a KernelBench problem: the Model is the reference
    # The judge upcasts the floating inputs to the task's reference dtype (not always float64: a module
    # whose ops have no float64 kernel, like grouped_mm, is judged against float32).
    own_dtype = all(d == t.reference_dtype for d in t.dtypes)
    how = ("at the task's own dtype, not upcast" if own_dtype else
           f"in {_dtype_name(t.reference_dtype)}, on the inputs upcast to it")
    lines += ["", f"Reference (the judge runs it {how}, in its own process):",
              _code(ref or "(source not available)", max_lines)]
    cost = _own_source(t.cost, t) if t.cost else None
    if cost:
        lines += ["", "Cost model (bytes any correct kernel must move, FLOPs it must do):", _code(cost, max_lines)]
    if with_inputs:
        inputs = _own_source(t.make_inputs, t)
        if inputs:
            lines += ["", "Input maker (fresh random data from a secret seed for every call):", _code(inputs, max_lines)]
    return "\n".join(lines)


def _check_rule(t: Task) -> str:
    from ratchet.task import StatisticalRule

    if isinstance(t.check, StatisticalRule):
        return ("statistical: sampled outputs must follow the task's distribution (tested per shape, false-reject "
                f"rate {t.check.false_reject_rate:g}, a failure confirmed on fresh draws before it rejects); greedy "
                "or approximate sampling fails.")
    if callable(t.check):
        # The check's docstring is its rule in words: what an agent must match, and how exactly.
        rule = " ".join((getattr(t.check, "__doc__", None) or "").split())
        return (f"the task's own check `{getattr(t.check, '__name__', 'check')}` against the reference"
                + (f": {rule}" if rule else "."))
    tol = "; ".join(f"{_dtype_name(d)} atol {v.atol:g} rtol {v.rtol:g}" for d, v in t.tolerances.items()
                    if d in t.dtypes)
    return (f"every element within |out - ref| <= atol + rtol * |ref| ({tol}); dtype, shape and device must match; "
            "no NaN/Inf where the reference has none.")


# -- 4. best candidate (or the seeds) -------------------------------------------------------------------


def _best_levels(f: _Facts) -> list[Level]:
    if f.best is None:
        return [lambda n=n: _seeds(f, n) for n in (None, 120, 60, 30, 12)]
    steps = [(None, "full"), (200, "full"), (120, "full"), (60, "full"), (60, "short"), (30, "short"),
             (20, "worst")]
    return [lambda s=s: _best(f, *s) for s in steps]


def _best(f: _Facts, max_lines: int | None, table: str) -> str:
    b = f.best
    lines = ["## Best candidate", "",
             f"Attempt #{b['seq']} of run {b['run_id']}: `{_basename(b['candidate_path'])}` (source "
             f"{b['source_sha256'][:10]}, proposer {b['proposer']}{_idea_note(b)}), config `{_config(b['config'])}`: "
             f"verdict **{b['verdict']}**, **{b['speedup']:.3f}x** over the reference."]
    if len(f.best_history) > 1:
        steps = [f"#{h['seq']} {h['speedup']:.2f}x" for h in f.best_history]
        if len(steps) > 8:
            steps = steps[:1] + ["…"] + steps[-6:]
        lines.append(f"Best over time: {' → '.join(steps)}.")
    space = _literal_assignments(b["source"])
    if space:
        lines.append(f"Its tunables: `{space}`.")
    notes = (b.get("extra") or {}).get("notes") or []
    if notes and table == "full":
        lines.append("Judge notes: " + "; ".join(_one_line(n, 200) for n in notes[:4]))
    counters = (b.get("extra") or {}).get("counters")
    source = _code(b["source"], max_lines)
    lines += ["", *_shape_table(f, b["shapes"], table, counters), *_counters_note(counters), "",
              "Source (the config above arrives as keyword arguments):", source]
    if "to bound the brief] ..." in source:
        lines.append(f"(Cut to bound the brief: `ratchet best {b['run_id']} -o FILE{f.ledger_arg}` writes the whole "
                     "file, its config baked in.)")
    return "\n".join(lines)


def _counters_note(counters: dict | None) -> list[str]:
    """Where the class comes from when ncu read the hardware counters (or why it could not)."""
    if not counters:
        return []
    if not counters.get("available"):
        return [f"Hardware counters: not read ({_one_line(counters.get('why') or '', 200)})."]
    return [f"Hardware counters (ncu, one profiled call on {_shape(counters.get('shape') or {})} "
            f"{counters.get('dtype')}; not the judge's): the class on that row uses them ({COUNTER_RULE})."]


def _shape_table(f: _Facts, shapes: list[dict], mode: str, counters: dict | None = None) -> list[str]:
    timed = [r for r in shapes if r.get("median_us") is not None]
    public = f.task.shape_set(f.device).public
    order = list(public[0]) if public else []  # the ledger stores shapes with sorted keys
    held = [r for r in shapes if r.get("held_out")]
    out: list[str] = []
    if timed:
        rows = []
        for r in timed:
            r = {**r, "shape": _ordered(r["shape"], order)}
            cost = _cost_of(f.task, r)
            floor = r.get("floor_us")
            if floor is None and cost is not None:
                floor = f.roof.floor_us(cost.bytes, cost.flops)
            frac = r.get("roofline_fraction")
            if frac is None and floor and r["median_us"]:
                frac = floor / r["median_us"]
            klass = _bottleneck(cost, f.roof, r["median_us"], floor, flops_known=not _is_kernelbench(f.task))
            mine = counters_for_row(r, counters)
            if mine:  # ncu read this shape: its counters refine the class and are shown beside it
                summary = mine.get("summary")
                klass = labelled(classify_with_counters(klass, summary, r["median_us"]), describe_counters(summary))
            rows.append((r, floor, frac, klass))
        shown = rows
        if mode == "worst" and len(rows) > 10:
            shown = sorted(rows, key=lambda x: x[0].get("speedup") or 0.0)[:10]
        if mode == "full":
            head = ["shape", "dtype", "mode", "µs", "ref µs", "speedup", "floor µs", "of floor", "TB/s", "class"]
        else:
            head = ["shape", "dtype", "µs", "speedup", "of floor", "class"]
        out += [_row(head), _row(["---"] * len(head))]
        for r, floor, frac, klass in shown:
            pct = "-" if not frac else f"{100 * frac:.0f}%" if frac >= 0.01 else f"{100 * frac:.2g}%"
            if mode == "full":
                cells = [_shape(r["shape"]), _dtype_name(r["dtype"]), r.get("mode") or "-", _us(r["median_us"]),
                         _us(r.get("ref_median_us")), _x(r.get("speedup")), _us(floor), pct,
                         _num(r.get("achieved_tbps")) if r.get("achieved_tbps") is not None else "-", klass]
            else:
                cells = [_shape(r["shape"]), _dtype_name(r["dtype"]), _us(r["median_us"]), _x(r.get("speedup")), pct, klass]
            out.append(_row(cells))
        if len(shown) < len(rows):
            sp = [x[0].get("speedup") for x in rows if x[0].get("speedup") is not None]
            out.append(f"({len(rows) - len(shown)} more rows, the slowest shown first above; speedups "
                       f"{min(sp):.2f}-{max(sp):.2f}x)" if sp else f"({len(rows) - len(shown)} more rows)")
    else:
        out.append("(no timed shapes recorded for this attempt)")
    if held:
        ok = sum(1 for r in held if r.get("correct", True))
        names = sorted({_shape(_ordered(r["shape"], order)) for r in held})
        out.append(f"Held-out shapes checked: {ok}/{len(held)} correct ({'; '.join(names[:6])}).")
    return out


def _seeds(f: _Facts, max_lines: int | None) -> str:
    lines = ["## Best candidate", ""]
    if f.run:
        lines.append(f"No candidate of run {f.run['id']} has passed and been kept yet. Start from a seed:")
    else:
        lines.append(f"None yet: no history for {f.task.name} on {f.device}. Starting points, the task's seeds:")
    fit, other = _seeds_for(f.task, f.device)
    if not fit:
        lines.append("(this task ships no seeds: write a candidate from the reference and the rules below)")
    sources = [path.read_text() for path in fit]
    for path, source in zip(fit, sources):
        lines += ["", f"### Seed `{path.name}`", _code(source, max_lines)]
    for path in _seed_helpers(f.task, sources):
        lines += ["", f"### `{path.name}`, which the seeds above import (a helper, not a seed)",
                  _code(path.read_text(), max_lines)]
    if other:
        lines += ["", f"Seeds for the other kind of device: {', '.join(p.name for p in other)}."]
    return "\n".join(lines)


def _seed_helpers(task: Task, sources: list[str]) -> list[Path]:
    """The helper modules of the seeds folder (``_*.py``: code seeds share, never a candidate) that one of
    ``sources`` imports, so a proposer sees all of a seed's code."""
    if not task.seeds_dir or not Path(task.seeds_dir).is_dir():
        return []
    helpers = sorted(Path(task.seeds_dir).glob("_*.py"))
    return [p for p in helpers if any(re.search(rf"\bseeds\.{re.escape(p.stem)}\b", src) for src in sources)]


def _seeds_for(task: Task, device: str) -> tuple[list[Path], list[Path]]:
    """The seeds a run on ``device`` starts from (``Task.seeds_for``), and the rest."""
    fit = task.seeds_for(device)
    return fit, [p for p in task.seeds() if p not in fit]


# -- 5. history -----------------------------------------------------------------------------------------

# (detailed candidates, attempt lines per candidate, dead ends); None is all.
_HISTORY_STEPS = [(None, 10, None), (16, 6, 30), (8, 4, 15), (4, 3, 8), (2, 2, 4), (1, 1, 0), (0, 0, 0)]


def _history_levels(f: _Facts) -> list[Level]:
    if not f.attempts:
        return [lambda: _history_empty(f)]
    groups = _groups(f)
    return [lambda s=s: _history(f, groups, *s) for s in _HISTORY_STEPS]


def _history_empty(f: _Facts) -> str:
    what = f"run {f.run['id']} has no attempts yet" if f.run else "nothing tried yet"
    extra = (f" ({f.other_device_runs} run(s) of this task on another device: `ratchet runs`)"
             if f.other_device_runs else "")
    return f"## History\n\n{what.capitalize()}{extra}."


@dataclass
class _Group:
    sha: str
    attempts: list[dict]

    @property
    def last_seq(self) -> int:
        return max(a["seq"] for a in self.attempts)

    @property
    def kept(self) -> bool:
        return any(a["kept"] for a in self.attempts)

    @property
    def top(self) -> float | None:
        sp = [a["speedup"] for a in self.attempts if a["verdict"] == "pass" and a["speedup"] is not None]
        return max(sp) if sp else None


def _groups(f: _Facts) -> list[_Group]:
    """Attempts grouped by source hash: the best's candidate first, then most recent first."""
    by: dict[str, list[dict]] = {}
    for a in f.attempts:
        by.setdefault(a["source_sha256"], []).append(a)
    groups = [_Group(sha, atts) for sha, atts in by.items()]
    best_sha = f.best["source_sha256"] if f.best else None
    groups.sort(key=lambda g: (g.sha != best_sha, -g.last_seq))
    return groups


def _history(f: _Facts, groups: list[_Group], n_groups: int | None, per_group: int, n_dead: int | None) -> str:
    atts = f.attempts
    count = Counter(a["verdict"] for a in atts)
    best_sha = f.best["source_sha256"] if f.best else None
    lines = ["## History", "",
             f"{len(atts)} attempts in run {f.run['id']}: {count['pass']} pass, {count['fail']} fail, {count['error']} "
             f"error; {len(groups)} distinct candidates (by source hash)."]
    if f.best_history:
        steps = [f"#{h['seq']} {h['speedup']:.2f}x" for h in f.best_history]
        if len(steps) > 8:
            steps = steps[:1] + ["…"] + steps[-6:]
        lines.append(f"Best over time: {' → '.join(steps)}.")
    tally = Counter(r["code"] for a in atts if a["verdict"] != "pass" for r in _reasons(a))
    if tally:
        lines.append("Why attempts failed (fail and error codes): "
                     + ", ".join(f"{c} ×{n}" for c, n in tally.most_common(10))
                     + (f", {len(tally) - 10} other codes" if len(tally) > 10 else "") + ".")
    tried = [i for i in f.ideas if any(a.get("idea_id") == i["id"] for a in atts)]
    if tried and n_groups != 0:
        lines.append("Ideas tried, one line each (attempts linked to the idea, passes, best, last failure):")
        lines += [_idea_outcome(i, atts) for i in tried[-8:]]
    live = [g for g in groups if g.kept or g.sha == best_sha]
    dead = [g for g in groups if g not in live]
    if n_groups != 0:
        shown = live if n_groups is None else live[:n_groups]
        lines += ["", "### Candidates that were kept (the best's first, then most recent)"]
        for g in shown:
            lines += _group_lines(g, per_group, best_sha)
        if not live:
            lines.append("- none yet")
        if len(shown) < len(live):
            lines.append(f"- … {len(live) - len(shown)} older kept candidates left out.")
        # What the run is trying now is informative even when it failed: the newest dead ends come next.
        shown_dead = dead if n_dead is None else dead[:n_dead]
        if dead:
            lines += ["", "### Dead ends (never kept; most recent first)"]
            for g in shown_dead:
                lines.append(_dead_line(g, f.best))
            if len(shown_dead) < len(dead):
                rest = dead[len(shown_dead):]
                none = sum(1 for g in rest if g.top is None)
                lines.append(f"- … {len(rest)} older dead ends left out ({none} never passed, "
                             f"{len(rest) - none} passed but never beat the best).")
    elif dead or live:
        none = sum(1 for g in dead if g.top is None)
        lines.append(f"Dead ends: {len(dead)} candidates never kept ({none} never passed). "
                     f"`ratchet show {f.run['id']}` lists every attempt.")
    return "\n".join(lines)


def _idea_outcome(idea: dict, attempts: list[dict]) -> str:
    """One idea in one line: "[3] pivot search → 4 attempts, 2 passed, best 1.80x; last failure
    wrong_output: ..." (the counts are the ledger's, over every run of the task)."""
    text = (f"- [{idea['id']}] {_one_line(idea['text'], 80)} → {_plural(idea['attempts'], 'attempt')}, "
            f"{idea['passed']} passed" + (f", best {idea['best_speedup']:.2f}x" if idea["best_speedup"] else "")
            + (", kept" if idea["kept"] else ""))
    failed = [a for a in attempts if a.get("idea_id") == idea["id"] and a["verdict"] != "pass" and _reasons(a)]
    if failed:
        reason = _reasons(failed[-1])[0]
        text += f"; last failure {reason['code']}: {_one_line(reason.get('detail', ''), 100)}"
    return text


def _group_lines(g: _Group, per_group: int, best_sha: str | None) -> list[str]:
    c = Counter(a["verdict"] for a in g.attempts)
    last = g.attempts[-1]
    star = " ★ the best's source" if g.sha == best_sha else ""
    lines = [f"- `{g.sha[:10]}` {_basename(last['candidate_path'])} ({last['proposer']}{_idea_note(last)}): "
             f"{_plural(len(g.attempts), 'attempt')}, {c['pass']} pass, {c['fail']} fail, {c['error']} error"
             f"{f', top {g.top:.3f}x' if g.top else ''}{star}"]
    chosen = _informative(g.attempts, per_group)
    for a in chosen:
        lines.append(f"  - {_attempt_line(a)}")
    if len(chosen) < len(g.attempts):
        lines.append(f"  - … {len(g.attempts) - len(chosen)} more configs")
    return lines


def _informative(attempts: list[dict], k: int) -> list[dict]:
    """Up to k attempts worth reading: the kept ones (newest first), one per distinct failure code (the
    newest), then the fastest passes; shown in seq order."""
    picked: list[dict] = []

    def take(a):
        if len(picked) < k and a not in picked:
            picked.append(a)

    newest = sorted(attempts, key=lambda a: -a["seq"])
    for a in newest:
        if a["kept"]:
            take(a)
    seen = set()
    for a in newest:
        codes = tuple(r["code"] for r in _reasons(a))
        if a["verdict"] != "pass" and codes not in seen:
            seen.add(codes)
            take(a)
    for a in sorted((a for a in attempts if a["verdict"] == "pass"), key=lambda a: -(a["speedup"] or 0.0)):
        take(a)
    for a in newest:
        take(a)
    return sorted(picked, key=lambda a: a["seq"])


def _attempt_line(a: dict) -> str:
    text = f"#{a['seq']} `{_config(a['config'])}` {a['verdict']}"
    if a["speedup"] is not None:
        text += f" {a['speedup']:.3f}x"
    if a["kept"]:
        text += " (kept)"
    reasons = _reasons(a)
    if reasons:
        r = reasons[0]
        text += f" — {r['code']}: {_one_line(r.get('detail', ''), 140)}"
        if len(reasons) > 1:
            text += f" (+{len(reasons) - 1} more: {', '.join(x['code'] for x in reasons[1:4])})"
        text += _right_before(a)
    return text


def _right_before(a: dict) -> str:
    """Where a failed attempt was right before it failed ("" if nowhere): an agent with no GPU learns
    which shapes passed there and can repeat the failing one alone (`ratchet eval --shape`)."""
    from ratchet.report.console import row_label

    right = [r for r in a.get("shapes") or [] if r.get("correct", True)]
    if a["verdict"] == "pass" or not right:
        return ""
    shown = "; ".join(row_label(r) for r in right[:3])
    return f"; right before it at {shown}" + (f" and {len(right) - 3} more" if len(right) > 3 else "")


def _dead_line(g: _Group, best: dict | None) -> str:
    last = g.attempts[-1]
    head = (f"- `{g.sha[:10]}` {_basename(last['candidate_path'])} ({last['proposer']}{_idea_note(last)}), "
            f"{_attempts_span(g)}: ")
    codes = Counter(r["code"] for a in g.attempts for r in _reasons(a))
    why = ", ".join(f"{c} ×{n}" for c, n in codes.most_common(3))
    if g.top is None:
        why = why or "no reasons recorded"
        last = next(((a, r) for a in reversed(g.attempts) for r in _reasons(a)), None)
        return head + f"none passed ({why})" + (
            f"; last: {last[1]['code']}: {_one_line(last[1].get('detail', ''), 100)}{_right_before(last[0])}"
            if last else "")
    than = f" ({best['speedup']:.2f}x)" if best else ""
    return head + f"passed, top {g.top:.3f}x, never beat the best{than}" + (f"; other configs: {why}" if why else "")


def _attempts_span(g: _Group) -> str:
    if len(g.attempts) == 1:
        return f"1 attempt #{g.last_seq}"
    return f"{len(g.attempts)} attempts #{g.attempts[0]['seq']}-#{g.last_seq}"


def _reasons(a: dict) -> list[dict]:
    return [r for r in (a.get("reasons") or []) if isinstance(r, dict) and "code" in r]


# -- 6. ideas -------------------------------------------------------------------------------------------


def _ideas_levels(f: _Facts) -> list[Level]:
    return [lambda n=n: _ideas(f, n) for n in (None, 10, 3, 0)]


def _ideas(f: _Facts, limit: int | None) -> str:
    pending = [i for i in f.ideas if i["status"] == "pending"]
    lines = ["## Pending ideas", ""]
    if not pending:
        lines.append(f"None. (`ratchet idea add {_task_spec(f.task)} \"...\"{f.ledger_arg}` records one.)")
        return "\n".join(lines)
    shown = pending if limit is None else pending[:limit]
    lines.append("From people and models, not tried yet (oldest first); an attempt built on one should cite it:")
    lines += [f"- [{i['id']}] {_one_line(i['text'], 400)} ({i['author']})" for i in shown]
    if len(shown) < len(pending):
        lines.append(f"- … {len(pending) - len(shown)} more (`ratchet idea list --task {f.task.name}{f.ledger_arg}`).")
    return "\n".join(lines)


# -- 7. rules -------------------------------------------------------------------------------------------


def _rules_levels(f: _Facts) -> list[Level]:
    # The middle level leaves out the checks that cost no GPU time: program.md says them in full, and a
    # brief for an LLM proposer has no use for them; the file format, the CUDA rule and the timing stay.
    return [lambda: _rules(f, True), lambda: _rules(f, True, checks=False), lambda: _rules(f, False)]


def _rules(f: _Facts, full: bool, checks: bool = True) -> str:
    t = f.task
    lines = ["## Rules", "", "The candidate file:",
             f"- A Python file defining `{kernel_signature(t)}` (the reference's parameters, in order) that returns the "
             "reference's outputs: same structure, dtype, shape and device; plain dense tensors with their own "
             "storage." + (" Or a KernelBench `ModelNew` class with `Model`'s constructor and forward."
                           if _is_kernelbench(t) else ""),
             "- Optional `SPACE = {\"BLOCK\": [256, 512], ...}`: a literal dict of non-empty lists; the first value of "
             "each is the default; a config (one value per name) arrives as keyword arguments of `kernel`.",
             "- Optional `CONSTRAINTS = [\"BLOCK_N % BLOCK_K == 0\"]`: expressions over SPACE names (names, numbers, "
             "arithmetic, comparisons) every config must meet."]
    if full:
        lines += ["- The kernel may be Triton, CUDA C++ built through torch's `cpp_extension`, or plain torch. It runs "
                  "in a worker subprocess on fresh random inputs for every call, on public and held-out shapes, in "
                  "every dtype; it must not change its inputs, leave work running (threads, processes, other "
                  "streams), switch precision flags (TF32), or reach into the harness.",
                  "- " + judge_facts.cuda_cpp_rule(),
                  "- Verdicts: `pass`; `fail` (wrong or cheating, with the codes below); `error` (could not be "
                  "judged). A pass is kept only if faster than the best beyond noise and slower on no shape."]
    forbidden = ", ".join(f"`{op}`" for op in t.forbidden)
    lines.append(f"- Forbidden ops (seen by the profiler however they are reached, a fallback included; code "
                 f"`forbidden_call`): {forbidden}." if t.forbidden else "- Forbidden ops: none for this task.")
    spec = _task_spec(t)
    if full:
        lines += ["", "How the judge times (what speedup and kept mean):", *judge_facts.timing_protocol(f.device)]
    if full and checks:
        lines += ["", "Cheaper checks before a judged attempt (no GPU needed):",
                  *judge_facts.correctness_only_check(spec),
                  "- " + judge_facts.compile_check(spec, judge_facts.gpu_arch(f.device_name) if f.device == "cuda"
                                                   else "sm_90")]
    lines += ["", "What the judge refuses (`fail`):"]
    lines += [f"- `{code}`: {why}" for code, why in FAIL_CODES.items()]
    lines += ["", "What it cannot judge (`error`):"]
    lines += [f"- `{code}`: {why}" for code, why in ERROR_CODES.items()]
    return "\n".join(lines)


# -- helpers --------------------------------------------------------------------------------------------


def _ledger_arg(ledger: Ledger) -> str:
    """`` --ledger PATH`` for commands the brief names, unless PATH is where they look by default."""
    from ratchet.run.ledger import default_ledger_path

    path = Path(ledger.path)
    return "" if path.resolve() == default_ledger_path().resolve() else f" --ledger {path}"


def _task_spec(task: Task) -> str:
    """How a command names the task: its built-in name when it is a built-in task, else its file."""
    from ratchet.task import BUILTIN_TASKS_DIR

    builtin = BUILTIN_TASKS_DIR / task.name / "task.py"
    if task.source_path and builtin.is_file() and Path(task.source_path).resolve() == builtin.resolve():
        return task.name
    return task.source_path or task.name


def _is_kernelbench(task: Task) -> bool:
    """A task made from a KernelBench problem file: its FLOPs are unknown (0) and Model is the reference."""
    return getattr(task.reference, "__module__", "") == "ratchet.kernelbench"


def kernel_signature(task: Task) -> str:
    """``kernel(a, b, ...)`` with the reference's parameters (a module task's own names, where its
    reference takes ``*arguments``)."""
    from ratchet.e2e.models.module_route import kernel_parameters, loaded_module_task

    if _is_kernelbench(task):
        return "kernel(*get_inputs())"  # or a KernelBench ModelNew with Model's constructor and forward
    module_task = loaded_module_task(task)
    if module_task is not None:
        return f"kernel({', '.join(kernel_parameters(module_task._SPEC))})"
    try:
        params = ", ".join(inspect.signature(task.reference).parameters)
    except (TypeError, ValueError):
        params = "..."
    return f"kernel({params})"


def reference_text(task: Task) -> str | None:
    """What the reference computes, as code an agent can read: its own source in the task's file; for a
    module task the file's docstring, which quotes the module's forwards (its reference only calls it)."""
    from ratchet.e2e.models.module_route import loaded_module_task

    module_task = loaded_module_task(task)
    if module_task is not None and module_task.__doc__:
        source = _own_source(task.reference, task) or ""
        return f'"""{module_task.__doc__.strip()}"""\n\n{source}'.rstrip()
    return _own_source(task.reference, task)


def _own_source(fn: Any, task: Task) -> str | None:
    """The source of a task function, when it lives in the task's own file (not in Ratchet's wrappers)."""
    try:
        path = inspect.getsourcefile(fn)
        if task.source_path and path and Path(path).resolve() != Path(task.source_path).resolve():
            return None
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _code(source: str, max_lines: int | None) -> str:
    return "```python\n" + _clip(source, max_lines).rstrip("\n") + "\n```"


def _clip(source: str, max_lines: int | None) -> str:
    """``source`` cut to about ``max_lines`` lines (and 100 characters a line on average): the head, then
    from the ``def kernel(`` line on, with a marker where lines were cut."""
    if max_lines is None:
        return source
    lines = source.splitlines()
    budget_chars = max_lines * 100
    if len(lines) <= max_lines and len(source) <= budget_chars:
        return source
    head_n = max(1, (max_lines * 3) // 5)
    tail_n = max_lines - head_n
    start = next((i for i, line in enumerate(lines) if line.startswith("def kernel(")), None)
    if start is None or start < head_n:
        start = max(head_n, len(lines) - tail_n)
    head, tail = lines[:head_n], lines[start:start + tail_n]
    cut_mid = start - head_n
    cut_end = len(lines) - (start + len(tail))
    out = head + ([f"# ... [{cut_mid} lines cut to bound the brief] ..."] if cut_mid else []) + tail
    if cut_end:
        out.append(f"# ... [{cut_end} lines cut to bound the brief] ...")
    text = "\n".join(line if len(line) <= 300 else line[:300] + " # ...[line cut]" for line in out)
    if len(text) > budget_chars:
        text = text[:budget_chars] + f"\n# ... [cut at {budget_chars} characters to bound the brief] ..."
    return text


def _literal_assignments(source: str) -> str:
    """``SPACE = ...; CONSTRAINTS = ...`` as written in the source, when it parses."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("SPACE", "CONSTRAINTS")
                                                for t in node.targets):
            segment = ast.get_source_segment(source, node)
            if segment:
                found.append(_one_line(segment, 400))
    return "; ".join(found)


def _cost_of(task: Task, row: dict):
    dtype = getattr(torch, str(row.get("dtype", "")).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        return None
    try:
        return task.shape_cost(row["shape"], dtype)
    except Exception:  # a task's cost model on a shape it was not written for: no class, no crash
        return None


def _idea_note(a: dict) -> str:
    if a.get("idea"):
        return f", idea: {_one_line(a['idea'], 80)}"
    if a.get("idea_id"):
        return f", idea [{a['idea_id']}]"
    return ""


def _is_range(spec) -> bool:
    return isinstance(spec, tuple) and len(spec) == 2


def _ordered(shape: dict, order: list[str]) -> dict:
    return {**{k: shape[k] for k in order if k in shape}, **shape}


def _shape(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def _long_dtype(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return _SHORT_DTYPES.get(name, name)


def _config(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _basename(path: str) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _num(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
