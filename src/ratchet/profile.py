"""Which ops of a workload matter: ``ratchet profile WORKLOAD``.

``profile_workload(name, size, ...)`` runs a workload's decode steps and a prefill under torch.profiler
(eager, so every op is visible; on CUDA the decode step is also timed as a CUDA graph replay, the way it
runs in production) and splits each step's time among
- the registry's ops: each call is wrapped in ``record_function("ratchet::op:<task>#<i>")`` through
  ``registry.use`` (the workloads are not touched), with its shape from the registry's own ``record()``,
  so it maps to its built-in task;
- everything else, grouped by the outermost profiler op (``aten::linear``, ``aten::_grouped_mm``,
  ``aten::scaled_dot_product_attention``, copies, ...) with its input shapes and dtypes;
- the rest of the step that no op covers (Python, launch gaps, profiler overhead).

For each op, Amdahl's bound: an op taking ``share`` of the step, made infinitely fast, speeds the step
up by at most ``1 / (1 - share)``; made 2x faster, by ``1 / (1 - share / 2)``. The tasks worth a run
are the built-in tasks ranked by share (decode weighs 1, prefill 0.5, as ``ratchet.task.decode_weight``
weighs shapes), each with the shapes the workload really runs and whether the task judges them.

``extract_tasks(profile, out_dir)`` writes a task file for each op family with no built-in task that it
knows how to rebuild (GEMMs run as ``F.linear``, ``torch.bmm``, the MoE experts' grouped GEMM, causal
prefill attention): the reference calls the same torch op the model's module calls, the public shapes
and dtypes are the ones profiled, the weights their share of the steps, plus a cost model, a
scaled-down CPU set and a seed that runs the reference, so ``ratchet eval`` and ``ratchet run`` take the
file as it is.

Times: on CUDA, device (kernel) time, so the shares are those of the GPU's work, over the CUDA-graph
step where it was timed. On the CPU, wall time under the profiler, which costs ~0.3-1 us per event it
records: an op made of many small ones (torch's CPU grouped GEMM runs one matmul per expert) looks
bigger than it is. Subtracting a per-event cost was tried and dropped: the cost differs between events
by 3x or more, so the correction wiped out such ops instead. The unprofiled step time is reported beside.
"""

from __future__ import annotations

import functools
import math
import statistics
import textwrap
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Callable, Sequence

import torch
from torch.autograd import DeviceType

PHASE_WEIGHTS = {"decode": 1.0, "prefill": 0.5}  # as ratchet.task.decode_weight weighs decode vs prefill shapes
OP_PREFIX = "ratchet::op:"
STEP_NAMES = {"decode": "ratchet::decode_step", "prefill": "ratchet::prefill"}
NOTABLE_SHARE = 0.01  # an op with no task is listed as worth a look from this share of a step on
WARMUP_STEPS = 2
DEFAULTS = {  # batch, context, prefill tokens, steps
    "full": {"batch": 8, "context": 4096, "prefill": 2048, "steps": 5},
    "tiny": {"batch": 2, "context": 32, "prefill": 32, "steps": 3},
}

_DTYPES = {"float": torch.float32, "c10::BFloat16": torch.bfloat16, "c10::Half": torch.float16,
           "double": torch.float64}

_FAMILIES = (
    ("gemm", ("aten::linear", "aten::mm", "aten::matmul", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::_grouped_mm", "aten::grouped_mm")),
    ("attention", ("aten::scaled_dot_product_attention",)),
    ("embedding", ("aten::embedding",)),
    ("copy/index", ("aten::copy_", "aten::index_put_", "aten::index", "aten::index_select", "aten::index_copy_",
                    "aten::cat", "aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy", "aten::repeat",
                    "aten::pad", "aten::constant_pad_nd", "aten::empty_like", "aten::fill_", "aten::zeros")),
    ("sort/select", ("aten::argsort", "aten::sort", "aten::searchsorted", "aten::topk", "aten::argmax")),
)


class ProfileError(Exception):
    """Bad input for a profile (unknown workload, bad numbers); the message is one line for the user."""


def amdahl(share: float, factor: float = math.inf) -> float:
    """Whole-step speedup when an op taking ``share`` of the step gets ``factor`` times faster."""
    rest = 1.0 - share + (share / factor if math.isfinite(factor) else 0.0)
    return math.inf if rest <= 0 else 1.0 / rest


def family_of(op: str) -> str:
    for family, names in _FAMILIES:
        if op in names:
            return family
    return "other"


def dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


# -- the result ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShapeTime:
    """One shape of an op in one phase: per step, its calls, time and share of the step."""

    shape: Any  # registry op: {dim: size} in the task's names; other ops: the profiler's input shapes
    dtype: str | None
    calls: float
    time_us: float
    share: float

    @property
    def label(self) -> str:
        return shape_label(self.shape)


@dataclass(frozen=True)
class OpTime:
    """One op in one phase: a built-in task (``task`` set) or a profiler op (``aten::...``)."""

    name: str
    task: str | None
    family: str
    calls: float  # per step
    time_us: float  # per step
    share: float  # of the phase's step time
    speedup_if_free: float  # Amdahl: the step's speedup if this op took no time
    speedup_if_2x: float  # ... if it ran 2x faster
    shapes: tuple[ShapeTime, ...]
    extractor: str | None = None  # the --extract family that rebuilds it as a task


@dataclass(frozen=True)
class Phase:
    name: str  # "decode" or "prefill"
    setting: dict  # batch, context / tokens
    steps: int  # steps profiled; times are per step, the least over them
    step_us: float  # the denominator of every share
    basis: str  # what step_us is: cpu_wall_profiled, device_kernels or cuda_graph
    unprofiled_step_us: float | None  # the same step without the profiler (eager; the fastest run)
    graph_step_us: float | None  # the decode step replayed as a CUDA graph (CUDA only)
    ops: tuple[OpTime, ...]  # by time, largest first
    other_us: float  # step time no op covers
    other_share: float
    notes: tuple[str, ...] = ()

    def op(self, name: str) -> OpTime | None:
        return next((o for o in self.ops if o.name == name), None)


@dataclass(frozen=True)
class Ranked:
    """An entry of the ranked list: a built-in task, or an op with no task."""

    name: str
    task: str | None
    family: str
    score: float  # weighted share: (1 x decode share + 0.5 x prefill share) / weights of the phases run
    shares: dict  # phase -> share
    speedup_if_free: dict  # phase -> Amdahl bound
    speedup_if_2x: dict
    shapes: dict  # phase -> [ShapeTime as JSON]
    extractor: str | None = None


@dataclass(frozen=True)
class Profile:
    workload: str
    size: str
    device: str
    dtype: str
    phases: tuple[Phase, ...]
    worth_a_run: tuple[Ranked, ...]  # built-in tasks by score
    no_task: tuple[Ranked, ...]  # ops with no task, from NOTABLE_SHARE of a phase on, by score
    notes: tuple[str, ...] = ()
    # Per phase: bucket -> (time per step, concrete inputs of its first call), for extraction.
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    # The model's weight shapes and dtypes: an op's dtype where the profiler records none (older torch).
    param_dtypes: dict = field(default_factory=dict, repr=False, compare=False)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("raw")
        out.pop("param_dtypes")
        return _finite(out)


def _finite(obj):
    """JSON has no infinity: an unbounded Amdahl speedup becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def shape_label(shape) -> str:
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in shape.items())
    return " x ".join(str(list(s)) for s in shape if s)


# -- profiling -------------------------------------------------------------------------------------------
def check_settings(name: str, size: str, device: str, batch: int, context: int, prefill_len: int,
                   steps: int) -> None:
    from ratchet.workloads import SIZES, WORKLOADS

    if name not in WORKLOADS:
        raise ProfileError(f"unknown workload '{name}' (workloads: {', '.join(WORKLOADS)})")
    if size not in SIZES:
        raise ProfileError(f"unknown size '{size}' (sizes: {', '.join(SIZES)})")
    if device not in ("cpu", "cuda"):
        raise ProfileError(f"device must be cpu or cuda, not '{device}'")
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfileError("--device cuda: no CUDA device is present on this machine (use --device cpu)")
    if size == "full" and device == "cpu":
        raise ProfileError("--size full needs --device cuda (its layers hold GBs of weights); use --size tiny "
                           "on the CPU")
    for label, value, low in (("--batch", batch, 1), ("--context", context, 0), ("--prefill", prefill_len, 0),
                              ("--steps", steps, 1)):
        if value < low:
            raise ProfileError(f"{label} must be at least {low}, not {value}")


def profile_workload(name: str, size: str = "tiny", device: str = "cpu", batch: int | None = None,
                     context: int | None = None, prefill_len: int | None = None, steps: int | None = None, *,
                     registry=None, model=None, progress: Callable[[str], None] | None = None,
                     seed: int = 0) -> Profile:
    """Profile ``steps`` decode steps (``batch`` rows after ``context`` cached tokens) and one prefill of
    ``prefill_len`` tokens (0: none) of workload ``name`` at ``size`` on ``device``.

    ``registry``: the op registry to build the model on (default: a fresh one, every op its reference);
    ``model``: an already built model (its own registry is then used). Defaults per size: DEFAULTS.
    """
    d = DEFAULTS.get(size, DEFAULTS["tiny"])
    batch = d["batch"] if batch is None else batch
    context = d["context"] if context is None else context
    prefill_len = d["prefill"] if prefill_len is None else prefill_len
    steps = d["steps"] if steps is None else steps
    check_settings(name, size, device, batch, context, prefill_len, steps)
    say = progress or (lambda _msg: None)
    if model is None:
        from ratchet.workloads import OpRegistry, build

        say(f"building {name} ({size}) on {device}")
        model = build(name, size, device=device, seed=seed, registry=registry or OpRegistry())
    notes = []
    if device == "cpu":
        notes.append("CPU wall times under the profiler (ops made of many small ones, like the CPU grouped GEMM, "
                     "look bigger than they are); they say nothing about a GPU")
    phases, raw = [], {}
    with _Annotated(model.ops) as annotated:
        say(f"profiling {steps} decode step(s): batch {batch}, context {context}")
        phase, raw["decode"] = _profile_decode(model, annotated, batch, context, steps, seed)
        phases.append(phase)
        if prefill_len:
            say(f"profiling {steps} prefill(s) of {prefill_len} tokens")
            phase, raw["prefill"] = _profile_prefill(model, annotated, prefill_len, steps, seed)
            phases.append(phase)
    worth, no_task = rank(phases, device)
    return Profile(workload=name, size=size, device=device, dtype=dtype_name(model.config.dtype),
                   phases=tuple(phases), worth_a_run=worth, no_task=no_task, notes=tuple(notes), raw=raw,
                   param_dtypes={tuple(p.shape): p.dtype for p in model.parameters()})


class _Annotated:
    """Every registry op wrapped in a profiler range named after its (task, shape, dtype), with the
    shape from the registry's own ``record()``; restored on exit."""

    def __init__(self, registry) -> None:
        self.registry = registry
        self.calls: list = []  # distinct OpCalls; a range's name carries its index here
        self._index: dict = {}

    def __enter__(self) -> "_Annotated":
        from contextlib import ExitStack

        from ratchet.workloads import OPS

        self._stack = ExitStack()
        self._recorded = self._stack.enter_context(self.registry.record())
        for op in OPS:
            self._stack.enter_context(self.registry.use(op, self._wrap(op, self.registry.get(op))))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _wrap(self, op: str, fn: Callable) -> Callable:
        def annotated(*args):
            call = self._recorded[-1]  # registry.call recorded this call just before calling us
            index = self._index.setdefault(call.key, len(self.calls))
            if index == len(self.calls):
                self.calls.append(call)
            with torch.profiler.record_function(f"{OP_PREFIX}{op}#{index}"):
                return fn(*args)

        return annotated


def _profiler(device: str):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities, record_shapes=True)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _profile_decode(model, annotated: _Annotated, batch: int, context: int, steps: int, seed: int):
    from ratchet.workloads.runner import DecodeStep, GraphCaptureError, fill_random, random_tokens

    dev = model.device
    cache = model.new_cache(batch, context + steps + WARMUP_STEPS)
    fill_random(model, cache, context, seed)
    tokens = random_tokens(model, batch, 1, seed + 1)[:, 0].clone()
    first = tokens.clone()

    def rewind():  # positions past the context are rewritten by each step before they are read
        cache.seq_lens.fill_(context)
        tokens.copy_(first)

    runner = DecodeStep(model, cache, tokens, cuda_graph=False)
    for _ in range(WARMUP_STEPS):
        runner.step()
    rewind()
    unprofiled = []
    for _ in range(steps):
        _sync(dev)
        t0 = time.perf_counter()
        runner.step()
        _sync(dev)
        unprofiled.append((time.perf_counter() - t0) * 1e6)
    rewind()
    with _profiler(dev.type) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP_NAMES["decode"]):
                runner.step()
                _sync(dev)
    rewind()
    graph_us, notes = None, []
    if dev.type == "cuda":
        try:
            graphed = DecodeStep(model, cache, tokens, cuda_graph=True)
            graph_us = _time_replays(graphed, steps, dev)
        except GraphCaptureError as exc:
            notes.append(f"no CUDA graph timing: {exc}")
        rewind()
    setting = {"batch": batch, "context": context, "cache_len": cache.max_len}
    return _phase("decode", setting, prof, annotated, unprofiled, graph_us, dev.type, notes)


def _time_replays(graphed, steps: int, dev) -> float:
    graphed.step()  # the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(steps):
        start.record()
        graphed.step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _profile_prefill(model, annotated: _Annotated, tokens_n: int, steps: int, seed: int):
    from ratchet.workloads.runner import random_tokens

    dev = model.device
    prompt = random_tokens(model, 1, tokens_n, seed)
    cache = model.new_cache(1, tokens_n)
    model.prefill(prompt, cache)  # warm-up
    unprofiled = []
    for _ in range(steps):
        _sync(dev)
        t0 = time.perf_counter()
        model.prefill(prompt, cache)
        _sync(dev)
        unprofiled.append((time.perf_counter() - t0) * 1e6)
    with _profiler(dev.type) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP_NAMES["prefill"]):
                model.prefill(prompt, cache)
                _sync(dev)
    return _phase("prefill", {"batch": 1, "tokens": tokens_n}, prof, annotated, unprofiled, None, dev.type, [])


def _phase(name, setting, prof, annotated, unprofiled_us: list, graph_us, device_type, notes):
    """Split the profiled steps' time among ops. Each op's time per step is the least over the steps (noise
    only ever adds time), and so is the step's, so the shares still add up to at most 1. Returns the Phase
    and, per bucket, (time per step, the first call's concrete inputs) for extraction."""
    # The CPU-side ranges only: on CUDA each range also has a GPU-side twin of the same name.
    step_events = [e for e in prof.events() if e.name == STEP_NAMES[name] and e.device_type == DeviceType.CPU]
    if not step_events:
        raise ProfileError(f"the profiler recorded no {name} step")
    per_step = []
    for step in step_events:
        buckets: dict[tuple, list] = defaultdict(list)
        _attribute(step, annotated, buckets)
        per_step.append(buckets)
    n = len(step_events)
    if device_type == "cuda":
        time_of, basis = _device_time, "device_kernels"
        step_us = min(e.device_time_total for e in step_events)
        if graph_us is not None and graph_us > step_us:
            step_us, basis = graph_us, "cuda_graph"
    else:
        time_of, basis = _cpu_time, "cpu_wall_profiled"
        step_us = min(e.cpu_time_total for e in step_events)
    first: dict[tuple, list] = {}
    calls: dict[tuple, float] = defaultdict(float)
    spent: dict[tuple, list] = defaultdict(list)
    for buckets in per_step:
        for key, events in buckets.items():
            first.setdefault(key, events)
            calls[key] += len(events) / n
            spent[key].append(sum(time_of(e) for e in events))
    times = {key: min(ts) for key, ts in spent.items()}
    covered = sum(times.values())
    step_us = max(step_us, covered)
    per_op: dict[str, list] = defaultdict(list)
    for key in first:
        per_op[key[1]].append(key)
    ops = []
    for op, keys in per_op.items():
        shapes = []
        for key in keys:
            if times[key] <= 0 and device_type == "cuda":  # no kernel: views, the synchronize closing a step
                continue
            shape, dtype = _shape_of(key, annotated)
            shapes.append(ShapeTime(shape=shape, dtype=dtype, calls=calls[key], time_us=times[key],
                                    share=_ratio(times[key], step_us)))
        if not shapes:
            continue
        shapes.sort(key=lambda s: -s.time_us)
        t = sum(s.time_us for s in shapes)
        share = _ratio(t, step_us)
        task = op if keys[0][0] == "task" else None
        ops.append(OpTime(name=op, task=task, family="task" if task else family_of(op),
                          calls=sum(s.calls for s in shapes), time_us=t, share=share,
                          speedup_if_free=amdahl(share), speedup_if_2x=amdahl(share, 2.0), shapes=tuple(shapes),
                          extractor=None if task else extractor_for(op)))
    ops.sort(key=lambda o: -o.time_us)
    other = max(step_us - covered, 0.0)
    phase = Phase(name=name, setting=setting, steps=n, step_us=step_us, basis=basis,
                  unprofiled_step_us=min(unprofiled_us), graph_step_us=graph_us, ops=tuple(ops), other_us=other,
                  other_share=_ratio(other, step_us), notes=tuple(notes))
    return phase, {key: (times[key], events[0].concrete_inputs) for key, events in first.items()}


def _device_time(event) -> float:
    return event.device_time_total


def _cpu_time(event) -> float:
    return event.cpu_time_total


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _attribute(event, annotated: _Annotated, buckets) -> None:
    """The outermost ops under ``event``: a registry op's range claims everything inside it; any other
    op is grouped by name, input shapes and dtypes; other ranges (none today) are looked through."""
    for child in event.cpu_children:
        name = child.name
        if name.startswith(OP_PREFIX):
            index = int(name.rsplit("#", 1)[1])
            buckets[("task", annotated.calls[index].task, index)].append(child)
        elif name.startswith("ratchet::"):
            _attribute(child, annotated, buckets)
        else:
            shapes = tuple(_freeze(s) for s in (child.input_shapes or ()))
            dtypes = tuple(str(d) for d in (getattr(child, "input_dtypes", None) or ()))
            buckets[("op", name, shapes, dtypes)].append(child)


def _freeze(shape):
    """A profiler input shape as a hashable tuple (tensor lists come as lists of shapes)."""
    return tuple(_freeze(s) for s in shape) if isinstance(shape, (list, tuple)) else shape


def _thaw(shape):
    return [_thaw(s) for s in shape] if isinstance(shape, tuple) else shape


def _shape_of(key: tuple, annotated: _Annotated):
    if key[0] == "task":  # the shape in the task's own dimension order
        call = annotated.calls[key[2]]
        return dict(call.shape), dtype_name(call.dtype)
    _, _op, shapes, dtypes = key
    first = next((d for d in dtypes if d in _DTYPES), None)
    return _thaw(shapes), dtype_name(_DTYPES.get(first)) if first else None


# -- ranking ---------------------------------------------------------------------------------------------
def rank(phases: Sequence[Phase], device: str) -> tuple[tuple[Ranked, ...], tuple[Ranked, ...]]:
    """Built-in tasks by weighted share; then ops with no task that reach NOTABLE_SHARE of a phase."""
    weights = {p.name: PHASE_WEIGHTS[p.name] for p in phases}
    total_weight = sum(weights.values()) or 1.0
    names: dict[str, OpTime] = {}
    for p in phases:
        for o in p.ops:
            names.setdefault(o.name, o)
    worth, no_task = [], []
    for op_name, first in names.items():
        present = {p.name: p.op(op_name) for p in phases if p.op(op_name)}
        shares = {ph: o.share for ph, o in present.items()}
        score = sum(weights[ph] * s for ph, s in shares.items()) / total_weight
        shapes = {ph: [_shape_json(s, o.task, device) for s in o.shapes] for ph, o in present.items()}
        entry = Ranked(name=op_name, task=first.task, family=first.family, score=score, shares=shares,
                       speedup_if_free={ph: o.speedup_if_free for ph, o in present.items()},
                       speedup_if_2x={ph: o.speedup_if_2x for ph, o in present.items()}, shapes=shapes,
                       extractor=first.extractor)
        if first.task:
            worth.append(entry)
        elif max(shares.values()) >= NOTABLE_SHARE:
            no_task.append(entry)
    worth.sort(key=lambda c: -c.score)
    no_task.sort(key=lambda c: -c.score)
    return tuple(worth), tuple(no_task)


def _shape_json(s: ShapeTime, task: str | None, device: str) -> dict:
    out = {"shape": s.shape, "dtype": s.dtype, "calls": s.calls, "time_us": s.time_us, "share": s.share}
    if task:
        out.update(task_coverage(task, s.shape, s.dtype, device))
    return out


def task_coverage(task_name: str, shape: dict, dtype: str | None, device: str) -> dict:
    """Whether built-in task ``task_name`` judges ``shape`` (public list, or held-out ranges) and ``dtype``
    on ``device``'s shape set."""
    task = _builtin_task(task_name)
    shape_set = task.shape_set(device)
    public = any(dict(p) == shape for p in shape_set.public)
    held = False
    if shape_set.held_out is not None:
        dims = shape_set.held_out.dims
        held = set(dims) == set(shape) and all(_in_spec(shape[k], dims[k]) for k in shape)
    judged = dtype in {dtype_name(d) for d in task.dtypes}
    return {"in_task_public": public, "in_task_held_out": held, "dtype_judged": judged}


@functools.lru_cache(maxsize=None)
def _builtin_task(name: str):
    from ratchet.task import load_task

    return load_task(name)


def _in_spec(value: int, spec) -> bool:
    if isinstance(spec, tuple) and len(spec) == 2:
        return spec[0] <= value <= spec[1]
    return value in list(spec)


# -- extraction: a task file for an op with no built-in task ---------------------------------------------
@dataclass(frozen=True)
class Extracted:
    name: str
    path: str
    seed: str
    family: str
    shapes: list  # the public (profiled) shapes
    cpu_shapes: list
    dtype: str
    written: bool  # False: the file existed and was kept (force=False)


def extractor_for(op: str) -> str | None:
    for family, spec in _EXTRACTORS.items():
        if op in spec["ops"]:
            return family
    return None


def _linear_dims(shapes, concrete):
    x, w = shapes[0], shapes[1]
    if len(shapes) > 2 and shapes[2]:
        return None  # with a bias: not the workloads' F.linear
    if len(w) != 2 or not x:
        return None
    return {"M": math.prod(x[:-1]), "N": w[0], "K": w[1]}


def _bmm_dims(shapes, concrete):
    a, b = shapes[0], shapes[1]
    if len(a) != 3 or len(b) != 3:
        return None
    return {"G": a[0], "M": a[1], "N": b[2], "K": a[2]}


def _sdpa_dims(shapes, concrete):
    q, k, v = shapes[0], shapes[1], shapes[2]
    concrete = list(concrete or [])
    mask = shapes[3] if len(shapes) > 3 else []
    causal = concrete[5] if len(concrete) > 5 else True
    scale = concrete[6] if len(concrete) > 6 else None
    if mask or causal is False or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None  # the template rebuilds causal attention without a mask only
    if scale is not None and abs(scale - q[3] ** -0.5) > 1e-9 * scale:
        return None  # a custom scale: not 1/sqrt(D)
    return {"B": q[0], "Hq": q[1], "Hkv": k[1], "S": q[2], "D": q[3], "Dv": v[3]}


def _grouped_dims(shapes, concrete):
    a, b = shapes[0], shapes[1]
    offs = shapes[2] if len(shapes) > 2 else []
    if len(a) != 2 or len(b) != 3 or offs != [b[0]]:
        return None  # only the 2D x 3D form with group ends (the MoE experts' form)
    return {"R": a[0], "E": b[0], "K": a[1], "N": b[2]}


GROUPED_B_BYTES_MAX = 2 << 30  # per call, in the task's dtype: the judge holds several copies of b


def _grouped_gpu(s, elt):
    """The real rows, in and out widths; experts cut to what the rows can touch (at most R) and to
    GROUPED_B_BYTES_MAX of weights, so the judge's copies fit on one GPU."""
    fit = max(GROUPED_B_BYTES_MAX // (s["K"] * s["N"] * elt), 1)
    return {**s, "E": max(min(s["E"], s["R"], fit), 1)}


def _grouped_cpu(s):
    def width(v):  # torch's grouped GEMM wants 16-byte aligned strides: multiples of 16 elements
        return max(16, min(v, 64) // 16 * 16)

    return {"R": min(s["R"], 64), "E": min(s["E"], 16), "K": width(s["K"]), "N": width(s["N"])}


def _linear_cpu(s):
    return {"M": min(s["M"], 64), "N": min(s["N"], 256), "K": min(s["K"], 256)}


def _bmm_cpu(s):
    return {"G": min(s["G"], 8), "M": min(s["M"], 64), "N": min(s["N"], 128), "K": min(s["K"], 128)}


def _sdpa_cpu(s):
    group = max(s["Hq"] // max(s["Hkv"], 1), 1)
    hkv = min(s["Hkv"], 2)
    return {"B": 1, "Hq": hkv * min(group, 4), "Hkv": hkv, "S": min(s["S"], 64), "D": s["D"], "Dv": s["Dv"]}


_EXTRACTORS: dict[str, dict] = {
    "linear": {"ops": ("aten::linear",), "dims": ("M", "N", "K"), "read": _linear_dims, "cpu": _linear_cpu},
    "bmm": {"ops": ("aten::bmm",), "dims": ("G", "M", "N", "K"), "read": _bmm_dims, "cpu": _bmm_cpu},
    "prefill_attention": {"ops": ("aten::scaled_dot_product_attention",), "dims": ("B", "Hq", "Hkv", "S", "D", "Dv"),
                          "read": _sdpa_dims, "cpu": _sdpa_cpu},
    "grouped_mm": {"ops": ("aten::_grouped_mm", "aten::grouped_mm"), "dims": ("R", "E", "K", "N"),
                   "read": _grouped_dims, "cpu": _grouped_cpu, "gpu": _grouped_gpu},
}


def extract_tasks(profile: Profile, out_dir: str | Path, *, force: bool = False,
                  families: Sequence[str] | None = None) -> list[Extracted]:
    """Write DIR/<workload>_<family>[_<dtype>]/task.py (and seeds/torch_reference.py) for each extractable
    op family the profile found (or only ``families``), largest share first. An existing file is kept
    unless ``force``."""
    gathered = _gather(profile, families)
    out = []
    for (family, dtype), shapes in sorted(gathered.items(), key=lambda kv: -sum(kv[1].values())):
        dtypes_of_family = {d for f, d in gathered if f == family}
        name = f"{profile.workload}_{family}" + (f"_{dtype}" if len(dtypes_of_family) > 1 else "")
        out.append(_write_task(profile, family, dtype, shapes, Path(out_dir) / name, name, force))
    return out


def _gather(profile: Profile, families) -> dict:
    """(family, dtype) -> {shape tuple: weight}: weight = sum over phases of phase weight x share."""
    gathered: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    for phase in profile.phases:
        for key, (time_us, concrete) in profile.raw.get(phase.name, {}).items():
            if key[0] != "op":
                continue
            family = extractor_for(key[1])
            if family is None or (families and family not in families):
                continue
            spec = _EXTRACTORS[family]
            try:
                dims = spec["read"](_thaw(key[2]), concrete)
            except (IndexError, TypeError):  # a call of the op in a form the template does not rebuild
                dims = None
            dtype = _op_dtype(profile, key)
            if dims is None or dtype not in (torch.float32, torch.float16, torch.bfloat16):
                continue
            share = _ratio(time_us, phase.step_us)
            if "gpu" in spec:
                dims = spec["gpu"](dims, torch.empty((), dtype=dtype).element_size())
            shape = tuple(dims[d] for d in spec["dims"])
            gathered[family, dtype_name(dtype)][shape] += PHASE_WEIGHTS[phase.name] * share
    return gathered


def _op_dtype(profile: Profile, key: tuple) -> torch.dtype:
    """The dtype the profiler recorded for the op's first input; else that of the model weight its second
    input is (as stored, or transposed); else the model's."""
    recorded = next(iter(key[3]), None)
    if recorded in _DTYPES:
        return _DTYPES[recorded]
    second = list(key[2][1]) if len(key[2]) > 1 else []
    for shape in (second, second[:-2] + second[-2:][::-1]):
        if tuple(shape) in profile.param_dtypes:
            return profile.param_dtypes[tuple(shape)]
    return getattr(torch, profile.dtype)


def _write_task(profile, family, dtype, shapes: dict, folder: Path, name: str, force: bool) -> Extracted:
    spec = _EXTRACTORS[family]
    dims = spec["dims"]
    public = [dict(zip(dims, s)) for s in sorted(shapes, key=lambda s: -shapes[s])]
    weights = {s: round(max(w, 1e-6), 6) for s, w in shapes.items()}
    cpu = []  # a CPU shape weighs what the heaviest shape it was scaled from weighs
    for s in public:
        small = spec["cpu"](s)
        key = tuple(small[d] for d in dims)
        weights[key] = round(max(weights.get(key, 0.0), weights[tuple(s[d] for d in dims)]), 6)
        if small not in cpu:
            cpu.append(small)
    source = _task_source(profile, family, name, dtype, public, cpu, weights)
    seed = _seed_source(family)
    task_path, seed_path = folder / "task.py", folder / "seeds" / "torch_reference.py"
    written = force or not task_path.exists()
    if written:
        seed_path.parent.mkdir(parents=True, exist_ok=True)
        task_path.write_text(source)
        seed_path.write_text(seed)
    return Extracted(name=name, path=str(task_path), seed=str(seed_path), family=family, shapes=public,
                     cpu_shapes=cpu, dtype=dtype, written=written)


# The task files are written from the templates below: the reference is the torch call the model's module
# makes (named in a comment), so the baseline a candidate must beat is what the workload runs today.
_PREAMBLE = Template('''"""$title

$about$extra

Nothing is forbidden: the reference is the library op itself, so a candidate that calls it only ties.
Add `forbidden` if candidates must bring their own.
"""

import torch
import torch.nn.functional as F

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, tensor_bytes

''')

_TAIL = Template('''

# As profiled, heaviest first.
_GPU_SHAPES = [
$gpu_shapes
]
_CPU_SHAPES = [
$cpu_shapes
]
# ($dims_text) -> weight: the shape's share of the workload's steps.
_WEIGHTS = {
$weights
}


def weight(shape):
    return _WEIGHTS.get(tuple(shape[d] for d in $dims), min(_WEIGHTS.values()))


TASK = Task(
    name=$name,
    reference=reference,
    make_inputs=make_inputs,
    # $held_out_note
    gpu=ShapeSet(public=_GPU_SHAPES, held_out=ShapeRange(
        $gpu_held, count=2)),
    cpu=ShapeSet(public=_CPU_SHAPES, held_out=ShapeRange(
        $cpu_held, count=2)),
    dtypes=(torch.$dtype,),
    cost=cost,
    weight=weight,
    tolerances=$tolerances,
    reference_dtype=$reference_dtype,
    description=(
$description
    ),
)
''')

_LINEAR = '''def reference(x, w):
    # ratchet.workloads (every projection and the LM head): F.linear with nn.Linear's [out, in] weight, no bias.
    return F.linear(x, w)


def make_inputs(shape, dtype, device, generator):
    M, N, K = shape["M"], shape["N"], shape["K"]
    # Rows of varied magnitude (x0.3 to x3); weights drawn as the model draws them, std 1/sqrt(K), so the
    # outputs are O(1) whatever K.
    scale = 10.0 ** (torch.rand(M, 1, generator=generator, device=device) - 0.5)
    x = torch.randn(M, K, generator=generator, device=device) * scale
    w = torch.randn(N, K, generator=generator, device=device) * K ** -0.5
    return x.to(dtype), w.to(dtype)


def cost(shape, dtype):
    M, N, K = shape["M"], shape["N"], shape["K"]
    # Read x and w once, write out once; 2 FLOPs per multiply-add.
    moved = tensor_bytes((M, K), dtype) + tensor_bytes((N, K), dtype) + tensor_bytes((M, N), dtype)
    return Cost(bytes=moved, flops=2.0 * M * N * K)
'''

_BMM = '''def reference(a, b):
    # ratchet.workloads.deepseek (MLA decode): torch.bmm absorbs the key and value up-projections per head.
    return torch.bmm(a, b)


def make_inputs(shape, dtype, device, generator):
    G, M, N, K = shape["G"], shape["M"], shape["N"], shape["K"]
    scale = 10.0 ** (torch.rand(G, M, 1, generator=generator, device=device) - 0.5)
    a = torch.randn(G, M, K, generator=generator, device=device) * scale
    b = torch.randn(G, K, N, generator=generator, device=device) * K ** -0.5
    return a.to(dtype), b.to(dtype)


def cost(shape, dtype):
    G, M, N, K = shape["G"], shape["M"], shape["N"], shape["K"]
    moved = tensor_bytes((G, M, K), dtype) + tensor_bytes((G, K, N), dtype) + tensor_bytes((G, M, N), dtype)
    return Cost(bytes=moved, flops=2.0 * G * M * N * K)
'''

_SDPA = '''def reference(q, k, v):
    # ratchet.workloads.core.causal_attention: causal, scale 1/sqrt(D), query head h reads kv head
    # h // (Hq // Hkv).
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def make_inputs(shape, dtype, device, generator):
    B, Hq, Hkv, S, D, Dv = (shape[d] for d in ("B", "Hq", "Hkv", "S", "D", "Dv"))
    # Scores spread over a few units (peaked and flat rows both occur); values with a per-head offset so
    # a wrong weighting shows.
    q = torch.randn(B, Hq, S, D, generator=generator, device=device) * 1.5
    k = torch.randn(B, Hkv, S, D, generator=generator, device=device) * 1.5
    v = torch.randn(B, Hkv, S, Dv, generator=generator, device=device)
    v = v + torch.randn(B, Hkv, 1, Dv, generator=generator, device=device)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def cost(shape, dtype):
    B, Hq, Hkv, S, D, Dv = (shape[d] for d in ("B", "Hq", "Hkv", "S", "D", "Dv"))
    moved = (tensor_bytes((B, Hq, S, D), dtype) + tensor_bytes((B, Hkv, S, D + Dv), dtype)
             + tensor_bytes((B, Hq, S, Dv), dtype))
    pairs = B * Hq * S * (S + 1) / 2  # causal: each query sees itself and the ones before it
    return Cost(bytes=moved, flops=2.0 * pairs * (D + Dv))
'''

_GROUPED_FN = '''# torch's grouped GEMM takes these dtypes here (on CUDA bf16 only, so an fp32 check never meets TF32).
_LIBRARY_DTYPES = {"cpu": (torch.float32, torch.bfloat16, torch.float16), "cuda": (torch.bfloat16,)}
_GROUPED_MM = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def $fn(a, b, offs):
    # ratchet.workloads.deepseek.grouped_mm: rows offs[e-1]:offs[e] of a times b[e], empty groups allowed.
    # torch's grouped GEMM where it takes the dtype, as the model runs it; else (float64, unaligned
    # widths) the same product one group at a time.
    if _GROUPED_MM is not None and a.dtype in _LIBRARY_DTYPES.get(a.device.type, ()):
        try:
            return _GROUPED_MM(a, b, offs=offs)
        except RuntimeError:  # strides not 16-byte aligned
            pass
    out = a.new_zeros(a.shape[0], b.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end] @ b[e]
        start = end
    return out
'''

_GROUPED = Template(_GROUPED_FN).substitute(fn="reference") + '''

def make_inputs(shape, dtype, device, generator):
    R, E, K, N = shape["R"], shape["E"], shape["K"], shape["N"]
    # Rows go to experts of uneven popularity, as a trained router sends them: some hot, some empty (empty
    # groups must work); rows come sorted by expert, as the model sorts its token-slots.
    popularity = torch.softmax(torch.randn(E, generator=generator, device=device), 0)
    expert = torch.multinomial(popularity, R, replacement=True, generator=generator)
    offs = torch.bincount(expert, minlength=E).cumsum(0).to(torch.int32)
    scale = 10.0 ** (torch.rand(R, 1, generator=generator, device=device) - 0.5)
    a = torch.randn(R, K, generator=generator, device=device) * scale
    # nn.Linear's layout per expert, [E, N, K], handed over transposed as the model does: b is column-major,
    # the layout torch's grouped GEMM kernels take.
    w = torch.randn(E, N, K, generator=generator, device=device) * K ** -0.5
    return a.to(dtype), w.to(dtype).transpose(1, 2), offs


def cost(shape, dtype):
    R, E, K, N = shape["R"], shape["E"], shape["K"], shape["N"]
    # A floor whatever the routing: read a, write out, and at least one expert's weights (an expert no row
    # reaches need not be read); every row does K x N multiply-adds.
    moved = tensor_bytes((R, K), dtype) + tensor_bytes((R, N), dtype) + tensor_bytes((K, N), dtype)
    return Cost(bytes=moved, flops=2.0 * R * K * N)
'''

_SEED_DOC = '"""The reference as a candidate: $what, the op the model runs (the baseline to beat)."""\n\n'
_SEEDS = {
    "linear": ("F.linear", "import torch.nn.functional as F\n\n\ndef kernel(x, w):\n    return F.linear(x, w)\n"),
    "bmm": ("torch.bmm", "import torch\n\n\ndef kernel(a, b):\n    return torch.bmm(a, b)\n"),
    "prefill_attention": ("torch's SDPA", "import torch.nn.functional as F\n\n\ndef kernel(q, k, v):\n"
                          "    return F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                          "                                          enable_gqa=q.shape[1] != k.shape[1])\n"),
    "grouped_mm": ("torch's grouped GEMM", "import torch\nimport torch.nn.functional as F\n\n"
                   + Template(_GROUPED_FN).substitute(fn="kernel")),
}


def _seed_source(family: str) -> str:
    what, body = _SEEDS[family]
    return Template(_SEED_DOC).substitute(what=what) + body


def _held(dims: dict) -> str:
    return "dims={" + ", ".join(f"{k!r}: {v!r}" for k, v in dims.items()) + "}"


def _family_text(family, profile, dtype, public, cpu) -> dict:
    """What differs per family: title, body, held-out ranges, description."""
    wl = profile.workload

    def values(dim):
        return sorted({s[dim] for s in public})

    def upto(dim, cap=4096):  # a range up to the largest profiled size (held-out draws are odd)
        return (1, max(min(max(values(dim)), cap), 2))

    if family == "linear":
        return dict(
            title=f"{wl} ({profile.size}): the GEMMs the model runs as F.linear, out [M, N] = x [M, K] @ w [N, K]^T, "
                  f"{dtype}.", body=_LINEAR,
            held_out_note="Held out: odd M (partial tiles) with the model's own N and K.",
            gpu_held={"M": upto("M"), "N": values("N"), "K": values("K")},
            cpu_held={"M": (1, 64), "N": (17, 300), "K": (17, 300)},
            description=f"The GEMMs of {wl} as F.linear runs them: x [M, K] times the transpose of w [N, K], "
                        f"{dtype} in and out with fp32 (or better) accumulation. Decode rows M are the batch: "
                        "skinny, memory-bound on reading w. Any M, N, K must work.")
    if family == "bmm":
        return dict(
            title=f"{wl} ({profile.size}): the batched GEMMs the model runs as torch.bmm, out [G, M, N] = "
                  f"a [G, M, K] @ b [G, K, N], {dtype}.", body=_BMM,
            held_out_note="Held out: odd M with the model's own G, N and K.",
            gpu_held={"G": values("G"), "M": upto("M"), "N": values("N"), "K": values("K")},
            cpu_held={"G": (1, 9), "M": (1, 64), "N": (17, 130), "K": (17, 130)},
            description=f"Batched GEMM as {wl} runs it (torch.bmm), {dtype} with fp32 (or better) accumulation; "
                        "any G, M, N, K must work.")
    if family == "prefill_attention":
        first, small = public[0], cpu[0]
        heads = ("Hq", "Hkv", "D", "Dv")
        return dict(
            title=f"{wl} ({profile.size}): causal prefill attention as the model runs it "
                  f"(F.scaled_dot_product_attention), {dtype}.", body=_SDPA,
            held_out_note="Held out: odd prompt lengths and batches with the model's own heads.",
            gpu_held={"B": (1, 2), **{h: [first[h]] for h in heads}, "S": upto("S", 1 << 20)},
            cpu_held={"B": (1, 2), **{h: [small[h]] for h in heads}, "S": (1, 80)},
            description=f"Causal self-attention over a prompt as {wl}'s prefill runs it: q [B, Hq, S, D], "
                        "k [B, Hkv, S, D], v [B, Hkv, S, Dv]; query head h reads kv head h // (Hq // Hkv); "
                        "out [B, Hq, S, Dv] = softmax(q k^T / sqrt(D), causal) v with fp32 softmax and "
                        "accumulation.")
    return dict(
        title=f"{wl} ({profile.size}): the MoE experts' grouped GEMM as the model runs it (torch's grouped_mm "
              f"over token-slots sorted by expert), {dtype}.", body=_GROUPED,
        extra="On the GPU set E is cut to at most R experts (R rows touch no more) and to 2 GiB of expert "
              "weights per call, so the judge's copies of b fit on one GPU; R, K and N are as profiled.",
        held_out_note="Held out: odd row counts (a fresh routing at every call) with the model's widths.",
        gpu_held={"R": upto("R", 1 << 20), "E": values("E"), "K": values("K"), "N": values("N")},
        cpu_held={"R": (1, 80), "E": [3, 16], "K": [16, 32], "N": [16, 48]},
        description="Grouped GEMM of MoE experts: a [R, K] holds token-slots sorted by expert, offs [E] int32 "
                    "the end of each expert's rows (offs[-1] = R; a group may be empty), b [E, K, N] the "
                    "experts' weights, column-major (a transposed [E, N, K]); out [R, N] = rows "
                    "offs[e-1]:offs[e] of a times b[e], with fp32 accumulation. Decode gives each expert a few "
                    "rows: memory-bound on reading b.")


def _tolerances(dtype: str, attention: bool) -> str:
    # bf16 attention: decode_attention's table (flash kernels round P to bf16 for the P.V dot).
    if dtype == "bfloat16":
        return f"{{torch.bfloat16: Tolerance(atol={2e-2 if attention else 1e-2}, rtol=1e-2)}}"
    if dtype == "float16":
        return "{torch.float16: Tolerance(atol=2e-3, rtol=1e-3)}"
    return "{torch.float32: Tolerance(atol=1e-5, rtol=1e-5)}"


def _wrap(text: str, width: int = 104) -> str:
    return "\n".join(textwrap.wrap(text, width))


def _task_source(profile, family, name, dtype, public, cpu, weights) -> str:
    text = _family_text(family, profile, dtype, public, cpu)
    dims = _EXTRACTORS[family]["dims"]
    setting = "; ".join(f"{p.name}: {', '.join(f'{k} {v}' for k, v in p.setting.items())}" for p in profile.phases)
    preamble = _PREAMBLE.substitute(
        title=_wrap(text["title"]),
        about=_wrap(f"Extracted by `ratchet profile {profile.workload} --size {profile.size} --device "
                    f"{profile.device} --extract` ({setting}). The public shapes are the ones that workload ran; "
                    "each weighs its share of the steps (decode x 1, prefill x 0.5). The CPU set is scaled down "
                    "from them."),
        extra="\n\n" + _wrap(text["extra"]) if text.get("extra") else "")
    # Adjacent string literals, each chunk keeping its trailing space, so the description reads as one line.
    chunks = textwrap.wrap(text["description"], 96, drop_whitespace=False)
    tail = _TAIL.substitute(
        gpu_shapes="\n".join(f"    {s!r}," for s in public), cpu_shapes="\n".join(f"    {s!r}," for s in cpu),
        dims_text=", ".join(dims), dims=repr(dims), name=repr(name), dtype=dtype,
        weights="\n".join(f"    {k!r}: {v!r}," for k, v in weights.items()),
        held_out_note=text["held_out_note"], gpu_held=_held(text["gpu_held"]), cpu_held=_held(text["cpu_held"]),
        tolerances=_tolerances(dtype, family == "prefill_attention"),
        reference_dtype="torch.float64" if dtype == "float32" else "torch.float32",
        description="\n".join(f"        {c!r}" for c in chunks))
    return preamble + "\n" + text["body"] + tail
