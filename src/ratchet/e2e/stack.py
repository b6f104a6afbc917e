"""Stacking (``ratchet stack WORKLOAD [RUN ...]``): promoted kernels and runtime layers applied in order
to one decode setting, each layer's gain attributed (a waterfall), all measured in one session.

Layers, in this order, each on top of everything before it:

1. ``eager``: the workload as it is, every op its task's reference;
2. ``+ OP (RUN)``: each run's best kernel, only when its gate file says it passed on this workload,
   size and device, on at least the default grid of that size, for the run's *current* best (same
   source hash and config); any other run is skipped with a note saying why;
3. ``+ CUDA graphs``: the decode step captured once and replayed (a GPU only; skipped on a CPU);
4. ``+ torch.compile (MODE)``: the step compiled (mode ``default`` unless ``--compile-mode``), then
   captured like layer 3 on a GPU. ``max-autotune-no-cudagraphs`` is offered too; torch's own CUDA
   graphs (``reduce-overhead``) are not used on top, since the graph of layer 3 already holds the step.

Kernels go first because that is what Ratchet adds; graphs and compile are what any deployment can
switch on, so the last layers show whether the kernels' gain survives them.

Besides the waterfall, a reference point: ``torch.compile`` with CUDA graphs *without* Ratchet's
kernels (the same compile mode and graph capture as layers 3-4, so the only difference from the top of
the stack is the kernels). On a CPU it is torch.compile alone. Tokens per second are reported against
eager and against that reference.

Attribution: each layer is credited with the time it saves over the layer below it (``t[i-1] - t[i]``,
from medians measured in one interleaved session), so the savings telescope: their sum is exactly the
eager step minus the top layer's, and the gains' product is exactly eager over top. A layer's gain
depends on what lies below it (graphs save more on a step with more launches); that is the order's
meaning, not an error.
"""

from __future__ import annotations

import functools
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ratchet.e2e.gate import (SAMPLING_OPS, TOP_P, GateError, covers_default_grid, covers_grid, device_name, read_gate,
                              route_into)
from ratchet.run.ledger import Ledger, config_key
from ratchet.e2e.step_timing import (
    DecodeBench, Entry, Timing, apply_impls, compare, policy_for, synchronize, time_interleaved, tokens_per_s,
)
from ratchet.e2e.models import load_model
from ratchet.e2e.workloads import OPS, OpRegistry, load_kernel

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


class StackError(Exception):
    """The stack cannot be built as asked; one line, exit 2."""


@dataclass(frozen=True)
class StackRequest:
    workload: str
    runs: tuple[str, ...]
    size: str
    device: str
    batch: int
    context: int
    compile: bool = True
    compile_mode: str = "default"
    no_compile_why: str = "--no-compile"  # what the note says when ``compile`` is off
    seed: int = 0
    grid: Any = None  # a GateGrid: the gate must have covered it (default: the size's default grid)


def default_setting(size: str) -> tuple[int, int]:
    """(batch, context) when not given: full 32 rows at 8k, tiny 4 rows at 256."""
    return (32, 8192) if size == "full" else (4, 256)


@dataclass
class Promoted:
    run: str
    op: str
    attempt: dict
    kernel: Callable
    module_task: str | None = None  # a module task's file: its kernel replaces whole modules of the model


@dataclass
class Layer:
    name: str
    kind: str  # baseline | kernel | cuda_graphs | compile | reference
    timing: Timing | None = None
    saved_us: float | None = None  # over the layer below (None for the first layer and the reference)
    gain: float | None = None  # t(below) / t(this)
    vs_below: str | None = None  # "faster" | "slower" | "within noise", beyond the noise floor or not
    speedup_vs_eager: float | None = None
    tokens_per_s: float | None = None
    max_logit_diff: float | None = None  # against eager, from the same state: what the layer changes
    run: str | None = None
    op: str | None = None
    attempt_seq: int | None = None

    def to_json(self) -> dict:
        t = self.timing
        return {"name": self.name, "kind": self.kind, "run": self.run, "op": self.op, "attempt_seq": self.attempt_seq,
                "step_us": t.median_us if t else None, "iqr_us": t.iqr_us if t else None,
                "batches": t.batches if t else None, "saved_us": self.saved_us, "gain": self.gain,
                "vs_below": self.vs_below, "speedup_vs_eager": self.speedup_vs_eager,
                "tokens_per_s": self.tokens_per_s, "max_logit_diff": self.max_logit_diff}


@dataclass
class StackResult:
    workload: str
    size: str
    device: str
    device_name: str
    batch: int
    context: int
    layers: list[Layer] = field(default_factory=list)
    reference: Layer | None = None
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def eager_us(self) -> float:
        return self.layers[0].timing.median_us

    @property
    def final_us(self) -> float:
        return self.layers[-1].timing.median_us

    @property
    def total_saved_us(self) -> float:
        return self.eager_us - self.final_us

    def to_json(self) -> dict:
        ref = self.reference
        ref_us = ref.timing.median_us if ref and ref.timing else None
        return {
            "workload": self.workload, "size": self.size, "device": self.device, "device_name": self.device_name,
            "batch": self.batch, "context": self.context, "layers": [layer.to_json() for layer in self.layers],
            "reference": ref.to_json() if ref else None, "eager_us": self.eager_us, "final_us": self.final_us,
            "total_saved_us": self.total_saved_us, "speedup_vs_eager": self.eager_us / self.final_us,
            "speedup_vs_reference": ref_us / self.final_us if ref_us else None,
            "tokens_per_s": {"eager": tokens_per_s(self.batch, self.eager_us),
                             "final": tokens_per_s(self.batch, self.final_us),
                             "reference": tokens_per_s(self.batch, ref_us) if ref_us else None},
            "notes": self.notes, "wall_s": self.wall_s,
        }


def promoted_kernels(ledger: Ledger, gates_dir: Path, request: StackRequest, kernel_dir: Path) -> tuple[
        list[Promoted], list[str]]:
    """The runs' best kernels that passed their gate on this workload, size and device, loaded; and a
    note for every run left out."""
    out: list[Promoted] = []
    notes: list[str] = []
    where = f"{request.workload} ({request.size}, {request.device})"
    for run_id in request.runs:
        run = ledger.get_run(run_id)
        best = ledger.best(run_id)
        gate = read_gate(gates_dir, run_id, request.workload, request.size, request.device)
        again = f"'ratchet gate {run_id} --workload {request.workload} --size {request.size} --device {request.device}'"
        taken = next((p for p in out if p.op == run["task"]), None)
        if best is None:
            notes.append(f"run {run_id} skipped: it has no kept kernel")
        elif gate is None:
            notes.append(f"run {run_id} skipped: not gated on {where}; run {again}")
        elif not gate.get("passed"):
            why = "; ".join(r["code"] for r in gate.get("reasons", [])) or "failed"
            notes.append(f"run {run_id} skipped: it failed its gate on {where} ({why})")
        elif not (covers_grid(gate, request.grid) if request.grid else covers_default_grid(gate, request.size)):
            notes.append(f"run {run_id} skipped: its gate covered less than the default grid of {request.size} "
                         f"(contexts, batches, prefill); run {again}")
        elif (gate["attempt"]["source_sha256"], gate["attempt"]["config_key"]) != (
                best["source_sha256"], config_key(best["config"])):
            notes.append(f"run {run_id} skipped: its best changed since the gate (gated attempt "
                         f"{gate['attempt']['seq']}, best now attempt {best['seq']}); run {again}")
        elif taken is not None:
            notes.append(f"run {run_id} skipped: op {run['task']} already comes from run {taken.run}")
        else:
            path = kernel_dir / f"kernel_{best['source_sha256'][:12]}.py"
            path.write_text(best["source"])
            # A module op has no custom-op schema: its kernel runs as it was judged, opaque to torch.compile.
            module_task = run["task_path"] if run["task"] not in OPS else None
            try:
                kernel = load_kernel(path, best["config"], op=None if module_task else run["task"])
            except Exception as exc:
                notes.append(f"run {run_id} skipped: its kernel does not load here ({type(exc).__name__}: {exc})")
                continue
            out.append(Promoted(run_id, run["task"], best, kernel, module_task))
    return out, notes


def compiled_decode_step(model, mode: str) -> Callable:
    """``model.decode_step`` under torch.compile. The decode step is compiled without its
    ``inference_mode`` wrapper and called under ``no_grad``: compiled under inference mode, steps that
    write a cache made outside it failed (torch 2.13, CPU: "Cannot set version_counter for inference
    tensor")."""
    raw = getattr(type(model).decode_step, "__wrapped__", None)
    fn = torch.compile(functools.partial(raw, model) if raw else model.decode_step, mode=mode, dynamic=False)

    def forward(tokens, cache):
        with torch.no_grad():
            return fn(tokens, cache)

    return forward


@dataclass
class _Plan:
    layer: Layer
    impls: dict
    graphs: bool
    compiled: bool


def run_stack(ledger: Ledger, request: StackRequest, gates_dir: Path,
              progress: Callable[[str], None] = lambda line: None) -> StackResult:
    started = time.monotonic()
    if request.compile_mode not in COMPILE_MODES:
        raise StackError(f"compile mode '{request.compile_mode}' is not one of {', '.join(COMPILE_MODES)}")
    cuda = request.device == "cuda"
    result = StackResult(request.workload, request.size, request.device, device_name(request.device),
                         request.batch, request.context)
    with tempfile.TemporaryDirectory(prefix="ratchet-stack-") as tmp:
        promoted, notes = promoted_kernels(ledger, gates_dir, request, Path(tmp))
        result.notes += notes
        plans = _plan(request, promoted, result.notes)
        model = load_model(request.workload, size=request.size, device=request.device, seed=request.seed,
                           registry=OpRegistry())
        if not getattr(model, "decodes", True):
            raise StackError(f"{request.workload} is a forward-only module (no decode step): the stack needs a decoder")
        for p in promoted:
            if p.module_task:
                try:
                    route = route_into(model, p.op, p.module_task)
                except GateError as exc:  # it passed its gate on this model: a model changed since
                    raise StackError(f"run {p.run}: {exc}") from None
                result.notes.append(f"{p.op}: the kernel runs {len(route.routed)} {route.module_class} module(s)")
        top_p = TOP_P if any(p.op in SAMPLING_OPS for p in promoted) else None
        policy = policy_for(request.device)
        bench = DecodeBench(model, request.batch, request.context, slack=policy.max_steps + 4, seed=request.seed,
                            top_p=top_p)
        forward = compiled_decode_step(model, request.compile_mode) if any(p.compiled for p in plans) else None
        entries, logits = [], []
        for plan in plans:
            progress(f"stack: preparing '{plan.layer.name}' ...")
            apply_impls(model.ops, plan.impls)
            fwd = forward if plan.compiled else None
            if fwd is not None:  # compile (and autotune) before the capture and off the clock
                bench.reset()
                fwd(bench.tokens, bench.cache)
                synchronize(request.device)
            step = bench.runner(cuda_graph=plan.graphs and cuda, forward=fwd)
            bench.reset()
            logits.append(step.step().detach().float().clone())
            entries.append(Entry(plan.layer.name, step.step, _prepare(model.ops, plan.impls, bench)))
        progress(f"stack: timing {len(entries)} settings interleaved ...")
        timings = time_interleaved(entries, request.device, policy, seed=request.seed)
        apply_impls(model.ops, {})
    _attribute(result, plans, timings, logits, policy)
    result.wall_s = time.monotonic() - started
    return result


def _prepare(registry, impls, bench) -> Callable[[], None]:
    def go():
        apply_impls(registry, impls)
        bench.reset()
    return go


def _plan(request: StackRequest, promoted: list[Promoted], notes: list[str]) -> list[_Plan]:
    cuda = request.device == "cuda"
    plans = [_Plan(Layer("eager", "baseline"), {}, False, False)]
    impls: dict[str, Any] = {}
    for p in promoted:
        impls = {**impls, p.op: p.kernel}
        plans.append(_Plan(Layer(f"+ {p.op} ({p.run} #{p.attempt['seq']})", "kernel", run=p.run, op=p.op,
                                 attempt_seq=p.attempt["seq"]), impls, False, False))
    if cuda:
        plans.append(_Plan(Layer("+ CUDA graphs", "cuda_graphs"), impls, True, False))
    else:
        notes.append("CUDA graphs layer skipped: there are no CUDA graphs on a CPU")
    if request.compile:
        plans.append(_Plan(Layer(f"+ torch.compile ({request.compile_mode})", "compile"), impls, cuda, True))
        label = "torch.compile + CUDA graphs" if cuda else "torch.compile (no CUDA graphs on a CPU)"
        plans.append(_Plan(Layer(f"{label}, without Ratchet's kernels", "reference"), {}, cuda, True))
    else:
        notes.append(f"torch.compile layer and the torch.compile + CUDA graphs reference skipped "
                     f"({request.no_compile_why})")
    if request.device == "cpu":
        notes.append("CPU timings say nothing about GPUs")
    return plans


def _attribute(result: StackResult, plans: list[_Plan], timings: list[Timing], logits: list[torch.Tensor],
               policy) -> None:
    eager = timings[0]
    below: Timing | None = None
    for plan, timing, out in zip(plans, timings, logits):
        layer = plan.layer
        layer.timing = timing
        layer.speedup_vs_eager = eager.median_us / timing.median_us
        layer.tokens_per_s = tokens_per_s(result.batch, timing.median_us)
        diff = (out - logits[0]).abs()
        layer.max_logit_diff = float(diff[torch.isfinite(diff)].max()) if diff.numel() else 0.0
        if layer.kind == "reference":
            result.reference = layer
            continue
        if below is not None:
            layer.saved_us = below.median_us - timing.median_us
            layer.gain = below.median_us / timing.median_us
            c = compare(below, timing, policy)
            layer.vs_below = "faster" if c.faster else "slower" if c.slower else "within noise"
        result.layers.append(layer)
        below = timing
