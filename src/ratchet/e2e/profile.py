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

Per phase, also the model's own modules (``ratchet.e2e.module_times``): each one's time, the ops in it
that no task or extractor covers, and Amdahl's bound; ``Profile.modules_no_task`` lists those worth a
task of their own.

Task files for the ops with no built-in task are written by ``ratchet.e2e.extract``; for the modules,
by ``ratchet.e2e.extract_module``.

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
import time
from collections import defaultdict
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Callable, Sequence

import torch
from torch.autograd import DeviceType

from ratchet.e2e.exported import PACKAGE_PREFIX
from ratchet.e2e.module_times import ModuleRanges, choose, module_times, not_remade, root_module

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


def _apply_package(model, folder: str, say: Callable[[str], None]) -> str:
    """Run an exported package's ``apply`` on the model; the note saying what it swapped."""
    from ratchet.e2e.exported import PackageError, load_package

    if getattr(model, "hf", None) is None:
        raise ProfileError("--apply takes a transformers model (a directory or config.json): an exported "
                           "package applies to those")
    try:
        package = load_package(folder)
    except PackageError as exc:
        raise ProfileError(str(exc)) from None
    say(f"applying {package.__name__} from {folder}")
    swapped = package.apply(model.hf).swapped
    done = ", ".join(f"{kind} x{n}" for kind, n in swapped.items() if n) or "nothing"
    return (f"with the package {package.__name__} applied ({folder}): it swapped {done}; its kernels show "
            "under their custom ops' names")


def _kept_notes(adaptation) -> list[str]:
    """One note per kind of module the adapter left as the model had it, and why: those calls appear
    as the model's own ops (``aten::...``), not as a built-in task, and a user should not have to guess."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, kind, why in getattr(adaptation, "kept", None) or []:
        groups.setdefault((kind, why), []).append(name)
    notes = []
    for (kind, why), names in groups.items():
        where = ", ".join(names[:2]) + (f", +{len(names) - 2} more" if len(names) > 2 else "")
        notes.append(f"{kind} not run through its built-in task in {len(names)} module(s) ({where}): {why}")
    return notes


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
    modules: tuple = ()  # ModuleTime per group of the model's modules, by time (ratchet.e2e.module_times)

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
class RankedModule:
    """A group of the model's modules whose time no task and no op extractor covers, worth a task of
    its own (``--extract`` writes one whose reference runs the module itself)."""

    name: str  # the class, qualified
    paths: tuple[str, ...]
    score: float  # weighted share, as Ranked's
    shares: dict  # phase -> share of the step
    uncovered_shares: dict  # phase -> share in ops no task or extractor covers
    uncovered_ops: dict  # phase -> those ops, by name
    speedup_if_free: dict
    speedup_if_2x: dict
    inputs: dict  # phase -> the recorded calls, as labels


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
    modules_no_task: tuple[RankedModule, ...] = ()  # model modules worth a task of their own, by score
    # Modules as large that no task can be made of: (class, paths, score, why), by score.
    modules_not_remade: tuple[tuple[str, tuple[str, ...], float, str], ...] = ()
    # Per phase: bucket -> (time per step, concrete inputs of its first call), for extraction.
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    # The model's weight shapes and dtypes: an op's dtype where the profiler records none (older torch).
    param_dtypes: dict = field(default_factory=dict, repr=False, compare=False)
    # The profiled model and its hooked modules with their recorded calls, for module extraction.
    model: Any = field(default=None, repr=False, compare=False)
    module_ranges: Any = field(default=None, repr=False, compare=False)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def to_json(self) -> dict:
        skip = ("raw", "param_dtypes", "model", "module_ranges")  # live objects, not results
        return _finite({f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip})


def _plain(obj):
    """A result as JSON-ready data (dataclasses.asdict would deep-copy the live model too)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


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
    from ratchet.e2e.models import ModelError, kind_of
    from ratchet.e2e.workloads import SIZES

    try:
        builtin = kind_of(name) == "builtin"
    except ModelError as exc:
        raise ProfileError(str(exc)) from None
    if size not in SIZES:
        raise ProfileError(f"unknown size '{size}' (sizes: {', '.join(SIZES)})")
    if device not in ("cpu", "cuda"):
        raise ProfileError(f"device must be cpu or cuda, not '{device}'")
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfileError("--device cuda: no CUDA device is present on this machine (use --device cpu)")
    if builtin and size == "full" and device == "cpu":
        raise ProfileError("--size full needs --device cuda (its layers hold GBs of weights); use --size tiny "
                           "on the CPU")
    for label, value, low in (("--batch", batch, 1), ("--context", context, 0), ("--prefill", prefill_len, 0),
                              ("--steps", steps, 1)):
        if value < low:
            raise ProfileError(f"{label} must be at least {low}, not {value}")


def profile_workload(name: str, size: str = "tiny", device: str = "cpu", batch: int | None = None,
                     context: int | None = None, prefill_len: int | None = None, steps: int | None = None, *,
                     registry=None, model=None, progress: Callable[[str], None] | None = None,
                     seed: int = 0, apply: str | None = None) -> Profile:
    """Profile ``steps`` decode steps (``batch`` rows after ``context`` cached tokens) and one prefill of
    ``prefill_len`` tokens (0: none) of workload ``name`` at ``size`` on ``device``.

    ``registry``: the op registry to build the model on (default: a fresh one, every op its reference);
    ``model``: an already built model (its own registry is then used); ``apply``: the folder of a
    ``ratchet export`` package whose ``apply`` is run on the (transformers) model first, so the profile
    shows where the step goes with its kernels in. Defaults per size: DEFAULTS.
    """
    d = DEFAULTS.get(size, DEFAULTS["tiny"])
    batch = d["batch"] if batch is None else batch
    context = d["context"] if context is None else context
    prefill_len = d["prefill"] if prefill_len is None else prefill_len
    steps = d["steps"] if steps is None else steps
    check_settings(name, size, device, batch, context, prefill_len, steps)
    say = progress or (lambda _msg: None)
    if model is None:
        from ratchet.e2e.models import ModelError, check_spec, load_model
        from ratchet.e2e.workloads import OpRegistry

        try:
            check_spec(name)
            say(f"building {name} ({size}) on {device}")
            model = load_model(name, size=size, device=device, seed=seed, registry=registry or OpRegistry())
        except ModelError as exc:
            raise ProfileError(str(exc)) from None
    notes = list(_kept_notes(getattr(model, "adaptation", None)))
    if apply:
        notes.insert(0, _apply_package(model, apply, say))
    if device == "cpu":
        notes.append("CPU wall times under the profiler (ops made of many small ones, like the CPU grouped GEMM, "
                     "look bigger than they are); they say nothing about a GPU")
    phases, raw = [], {}
    try:
        ranges = ModuleRanges(root_module(model))
        if not getattr(model, "decodes", True):  # a plain module: its forward on its example inputs
            notes.append("a forward-only module: one phase, its forward on the example inputs, weighed as a prefill")
            with _Annotated(model.ops) as annotated:
                say(f"profiling {steps} forward pass(es) on the example inputs")
                phase, raw["prefill"] = _profile_forward(model, annotated, ranges, steps)
                phases.append(phase)
        else:
            with _Annotated(model.ops) as annotated:
                say(f"profiling {steps} decode step(s): batch {batch}, context {context}")
                phase, raw["decode"] = _profile_decode(model, annotated, ranges, batch, context, steps, seed)
                phases.append(phase)
                if prefill_len:
                    say(f"profiling {steps} prefill(s) of {prefill_len} tokens")
                    phase, raw["prefill"] = _profile_prefill(model, annotated, ranges, prefill_len, steps, seed)
                    phases.append(phase)
    except (ProfileError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the user's model failed: one line that says where, not a traceback
        from ratchet.e2e.models import model_failure

        raise ProfileError(f"{name}: the model failed while it was profiled: {model_failure(exc)}") from None
    worth, no_task = rank(phases, device)
    return Profile(workload=name, size=size, device=device, dtype=dtype_name(model.config.dtype),
                   phases=tuple(phases), worth_a_run=worth, no_task=no_task, notes=tuple(notes), raw=raw,
                   param_dtypes={tuple(p.shape): p.dtype for p in model.parameters()},
                   modules_no_task=rank_modules(phases, ranges), modules_not_remade=unremade_modules(phases, ranges),
                   model=model, module_ranges=ranges)


class _Annotated:
    """Every registry op wrapped in a profiler range named after its (task, shape, dtype), with the
    shape from the registry's own ``record()``; restored on exit."""

    def __init__(self, registry) -> None:
        self.registry = registry
        self.calls: list = []  # distinct OpCalls; a range's name carries its index here
        self._index: dict = {}

    def __enter__(self) -> "_Annotated":
        from contextlib import ExitStack

        from ratchet.e2e.workloads import OPS

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


def _wall_times_us(step, steps: int, dev) -> list[float]:
    """Each of ``steps`` calls of ``step()`` timed on the wall clock, the device synchronized around it."""
    times = []
    for _ in range(steps):
        _sync(dev)
        t0 = time.perf_counter()
        step()
        _sync(dev)
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def _profile_steps(step, steps: int, dev, phase: str, ranges: ModuleRanges):
    """``steps`` calls of ``step()`` under the profiler, each marked as one step of ``phase``, with the
    model's module ranges recorded as ``phase``'s."""
    with ranges.phase(phase), _profiler(dev.type) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP_NAMES[phase]):
                step()
                _sync(dev)
    return prof


def _profile_decode(model, annotated: _Annotated, ranges: ModuleRanges, batch: int, context: int, steps: int,
                    seed: int):
    from ratchet.e2e.workloads.runner import DecodeStep, GraphCaptureError, fill_random, random_tokens

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
    unprofiled = _wall_times_us(runner.step, steps, dev)
    rewind()
    prof = _profile_steps(runner.step, steps, dev, "decode", ranges)
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
    return _phase("decode", setting, prof, annotated, ranges, unprofiled, graph_us, dev.type, notes)


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


def _profile_prefill(model, annotated: _Annotated, ranges: ModuleRanges, tokens_n: int, steps: int, seed: int):
    from ratchet.e2e.workloads.runner import random_tokens

    dev = model.device
    prompt = random_tokens(model, 1, tokens_n, seed)
    cache = model.new_cache(1, tokens_n)
    model.prefill(prompt, cache)  # warm-up
    unprofiled = _wall_times_us(lambda: model.prefill(prompt, cache), steps, dev)
    prof = _profile_steps(lambda: model.prefill(prompt, cache), steps, dev, "prefill", ranges)
    return _phase("prefill", {"batch": 1, "tokens": tokens_n}, prof, annotated, ranges, unprofiled, None, dev.type,
                  [])


def _profile_forward(model, annotated: _Annotated, ranges: ModuleRanges, steps: int):
    dev = model.device
    model.run()  # warm-up
    unprofiled = _wall_times_us(model.run, steps, dev)
    prof = _profile_steps(model.run, steps, dev, "prefill", ranges)
    shapes = [list(t.shape) for t in model.inputs if isinstance(t, torch.Tensor)]
    return _phase("prefill", {"forward_inputs": shapes}, prof, annotated, ranges, unprofiled, None, dev.type, [])


def _phase(name, setting, prof, annotated, ranges, unprofiled_us: list, graph_us, device_type, notes):
    """Split the profiled steps' time among ops. Each op's time per step is the least over the steps (noise
    only ever adds time), and so is the step's, so the shares still add up to at most 1. Returns the Phase
    and, per bucket, (time per step, the first call's concrete inputs) for extraction."""
    from ratchet.e2e.extract import extractor_for, op_covered  # extract imports this module

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
    modules = module_times(step_events, ranges, name, time_of, step_us, op_covered, amdahl)
    phase = Phase(name=name, setting=setting, steps=n, step_us=step_us, basis=basis,
                  unprofiled_step_us=min(unprofiled_us), graph_step_us=graph_us, ops=tuple(ops), other_us=other,
                  other_share=_ratio(other, step_us), notes=tuple(notes), modules=tuple(modules))
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
        elif max(shares.values()) >= NOTABLE_SHARE and not op_name.startswith(PACKAGE_PREFIX):
            no_task.append(entry)  # an applied package's op (profile --apply) is a kernel already, not one to make
    worth.sort(key=lambda c: -c.score)
    no_task.sort(key=lambda c: -c.score)
    return tuple(worth), tuple(no_task)


def rank_modules(phases: Sequence[Phase], ranges: ModuleRanges) -> tuple[RankedModule, ...]:
    """The module groups worth a task of their own (``module_times.choose``), by weighted share."""
    weights = {p.name: PHASE_WEIGHTS[p.name] for p in phases}
    total_weight = sum(weights.values()) or 1.0
    chosen = choose({p.name: p.modules for p in phases}, ranges, NOTABLE_SHARE)
    out = []
    for group in chosen:
        present = {p.name: m for p in phases for m in p.modules if m.name == group}
        first = next(iter(present.values()))
        out.append(RankedModule(
            name=group, paths=first.paths,
            score=sum(weights[ph] * m.share for ph, m in present.items()) / total_weight,
            shares={ph: m.share for ph, m in present.items()},
            uncovered_shares={ph: m.uncovered_share for ph, m in present.items()},
            uncovered_ops={ph: list(m.uncovered_ops) for ph, m in present.items()},
            speedup_if_free={ph: m.speedup_if_free for ph, m in present.items()},
            speedup_if_2x={ph: m.speedup_if_2x for ph, m in present.items()},
            inputs={ph: list(m.inputs) for ph, m in present.items()}))
    out.sort(key=lambda m: -m.score)
    return tuple(out)


def unremade_modules(phases: Sequence[Phase], ranges: ModuleRanges) -> tuple:
    """The module groups as large as ``rank_modules``' that no task can be made of, and why
    (``module_times.not_remade``), by the weighted share of the uncovered time they run themselves."""
    weights = {p.name: PHASE_WEIGHTS[p.name] for p in phases}
    total_weight = sum(weights.values()) or 1.0
    by_phase = {p.name: p.modules for p in phases}
    chosen = choose(by_phase, ranges, NOTABLE_SHARE)
    out = []
    for group, (why, own) in not_remade(by_phase, ranges, NOTABLE_SHARE, chosen).items():
        paths = next(m.paths for p in phases for m in p.modules if m.name == group)
        score = sum(weights[ph] * max(share, 0.0) for ph, share in own.items()) / total_weight
        out.append((group, paths, score, why))
    out.sort(key=lambda entry: -entry[2])
    return tuple(out)


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
