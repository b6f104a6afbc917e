"""The end-to-end gate (``ratchet gate RUN --workload W``): a kept kernel is promoted into a stack only
when the whole model step, with the kernel in place, is no slower and gives the same logits.

For each setting of a grid (decode at several contexts and batches, plus prefill), the run's best
kernel (its source and config, from the ledger) goes into the workload's op registry, and:

1. CUDA graphs: on a GPU, the decode step is captured in a CUDA graph with the kernel in place (the
   runner's own capture, ``GraphCaptureError`` naming the op); a kernel that breaks the capture fails.
   A CPU has no graphs, so the capture is *simulated*: one eager step runs with the kernel watched by
   ``CaptureSimulation``, which refuses what a capture refuses: a host read of a device value
   (``.item()``, ``float()``/``int()``/``bool()`` of a tensor, ``.tolist()``, ``.cpu()``, ``.numpy()``,
   ``.to("cpu")``, ``torch.equal``), and ops whose output shape depends on the data (``nonzero``,
   ``masked_select``, ``unique``, ``bincount``, boolean-mask indexing, ``repeat_interleave`` without
   ``output_size``): on CUDA each of these synchronizes with the host. Only the kernel is watched, not
   the workload around it (whose capture the GPU tests cover). Not simulated: host-to-device copies of
   new tensors and allocator behaviour; those only a real capture shows.
2. Logits: one step from the same state with and without the kernel (the timed path: graph replays on a
   GPU). The tolerance is the task's own, carried through the model: the baseline is run again with
   every output of the op moved to the edge of the task's tolerance for its dtype (each element by
   ``atol + rtol * |out|``, random sign), once for each of ``PERTURBATION_DRAWS`` draws of the signs,
   and the kernel's logits may differ from the baseline's by at most ``LOGITS_MARGIN`` times the most
   any draw moved them, plus the baseline's own repeat-to-repeat spread (several draws: one sign
   pattern may move them less than another). A MoE router's decisions are pinned at the baseline's for
   every one of these runs (``pin_routing``): its top-k turns a change far inside any tolerance into a
   jump when a near-tie flips an expert, which compares the luck of a tie, not the kernel. An
   honest kernel sits well inside its tolerance; a kernel that breaks on the workload's tensors
   (strides, layouts, lengths the judge's shapes missed) is off by orders of magnitude. Non-finite
   logits where the baseline's are finite fail. For ``top_p_sampling`` (whose draws come after the
   logits) the drawn tokens must be valid ids; their statistics are the judge's business.
3. Time: baseline and with-kernel steps in alternating batches (``ratchet.e2e.step_timing``), the router
   pinned as in 2 (both sides run the same experts); a setting fails when the kernel is slower beyond
   noise.

A correctness failure (capture, logits, a kernel that raises) stops the gate: later settings are
skipped. Slowness does not: the table shows every setting where it is slow. The outcome is written to
``<ledger dir>/gates/RUN-WORKLOAD-SIZE-DEVICE.json`` with the gated attempt's source hash and config,
which is what ``ratchet stack`` promotes from.
"""

from __future__ import annotations

import gc
import json
import math
import platform
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ratchet.run.ledger import Ledger, config_key
from ratchet.task import DEFAULT_TOLERANCES, load_task
from ratchet.e2e.step_timing import (
    Comparison, DecodeBench, Entry, StepTimingPolicy, Timing, apply_impls, compare, policy_for, time_interleaved,
)
from ratchet.e2e.export import shape_ranges
from ratchet.e2e.models import load_model, model_failure
from ratchet.e2e.models.module_route import ModuleRouteError, is_module_task, route_module
from ratchet.e2e.workloads import OPS, GraphCaptureError, OpRegistry, load_kernel
from ratchet.e2e.workloads.registry import reference
from ratchet.e2e.workloads.runner import random_tokens

LOGITS_MARGIN = 4.0  # how many times the tolerance-edge baseline's deviation the kernel may differ by
PERTURBATION_DRAWS = 3  # draws of the tolerance-edge signs; the budget takes the one that moved most
ROUTER_OP = "moe_route"  # its decisions are pinned at the baseline's while another op is gated (pin_routing)
SAMPLING_OPS = ("top_p_sampling",)
TOP_P = 0.9  # the nucleus the gate samples with when the op under test is a sampler


class GateError(Exception):
    """The gate cannot be run as asked (wrong op, no kept kernel, too little memory); one line, exit 2."""


@dataclass(frozen=True)
class GateGrid:
    contexts: tuple[int, ...]  # decode contexts that must all be measured
    batches: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]  # (batch, prompt length)
    extra_contexts: tuple[int, ...] = ()  # longer contexts, each measured only where memory allows


def default_grid(size: str) -> GateGrid:
    """``full``: contexts 1k, 8k and 32k (64k and 128k where memory allows) at batch 1 and 32, prefill of
    4096 tokens; ``tiny`` (a CPU): the same shape of grid scaled down: contexts 64, 256, 1024 at batch 1
    and 4, prefill of 256."""
    if size == "full":
        return GateGrid((1024, 8192, 32768), (1, 32), ((1, 4096),), (65536, 131072))
    return GateGrid((64, 256, 1024), (1, 4), ((1, 256),))


# -- the capture simulation (CPU) ----------------------------------------------------------------------

class CaptureBreak(RuntimeError):
    """Raised inside ``CaptureSimulation`` where a CUDA graph capture would have failed."""


_DATA_DEPENDENT = {"nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
                   "unique_dim_consecutive", "bincount"}
_MASK_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
_HOST_METHODS = {"tolist": "Tensor.tolist() copies to the host", "cpu": "Tensor.cpu() copies to the host",
                 "numpy": "Tensor.numpy() needs host memory", "__array__": "numpy conversion needs host memory"}


def _refused(func, args, kwargs) -> str | None:
    """Why a CUDA graph capture would refuse this aten call, or None."""
    name = func.overloadpacket.__name__
    if name in ("_local_scalar_dense", "item", "is_nonzero"):  # item/is_nonzero: as seen in inference mode
        return "reads a device value on the host (.item(), float(), int() or bool() of a tensor, `if tensor`)"
    if name in ("equal", "allclose"):
        return f"torch.{name} returns a host bool (a device-to-host sync)"
    if name in _DATA_DEPENDENT:
        return f"{name}: the output's shape depends on the data (the host must wait to learn it)"
    if name == "repeat_interleave" and func._overloadname == "Tensor" and kwargs.get("output_size") is None:
        return "repeat_interleave with tensor repeats and no output_size: a data-dependent shape"
    if name in _MASK_INDEXING and len(args) > 1 and isinstance(args[1], (list, tuple)):
        if any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in args[1]):
            return "boolean-mask indexing: how many elements it selects depends on the data"
    return None


class _Watch(TorchDispatchMode):
    def __init__(self, sim: "CaptureSimulation") -> None:
        super().__init__()
        self.sim = sim

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = _refused(func, args, kwargs)
        if why:
            self.sim.refuse(why)
        return func(*args, **kwargs)


class CaptureSimulation:
    """Inside ``with CaptureSimulation() as sim:``, what a CUDA graph capture refuses raises CaptureBreak
    and is remembered in ``sim.violations`` (so a kernel that catches the exception is still caught).
    Tensor methods that read to the host are patched on ``torch.Tensor`` for the block: on a CPU they
    are no-ops the dispatcher never sees, on a GPU they are syncs."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._saved: dict[str, Any] = {}
        self._mode: _Watch | None = None

    def refuse(self, why: str) -> None:
        self.violations.append(why)
        raise CaptureBreak(why)

    def _patch(self) -> None:
        missing = object()
        for name, why in _HOST_METHODS.items():
            self._saved[name] = torch.Tensor.__dict__.get(name, missing)

            def refused(*_a, _why=why, **_k):
                self.refuse(_why)

            setattr(torch.Tensor, name, refused)
        original_to = torch.Tensor.to
        self._saved["to"] = torch.Tensor.__dict__.get("to", missing)

        def to(tensor, *args, **kwargs):
            target = kwargs.get("device")
            for arg in args:
                if isinstance(arg, (str, torch.device)):
                    target = arg
            if target is not None and torch.device(target).type == "cpu":
                self.refuse("Tensor.to('cpu') copies to the host")
            return original_to(tensor, *args, **kwargs)

        torch.Tensor.to = to
        self._missing = missing

    def _unpatch(self) -> None:
        for name, value in self._saved.items():
            if value is self._missing:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, value)
        self._saved.clear()

    def __enter__(self) -> "CaptureSimulation":
        self._patch()
        self._mode = _Watch(self)
        try:
            self._mode.__enter__()
        except BaseException:
            self._unpatch()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._mode.__exit__(*exc)
        finally:
            self._unpatch()


def simulate_capture(bench: DecodeBench, registry: OpRegistry, op: str, kernel: Callable,
                     warmup: int = 2) -> str | None:
    """Run one eager decode step with ``kernel`` watched; why a capture would break, or None. The steps
    before it run unwatched, as a real capture's warm-up does (``DecodeStep``): what a kernel does once,
    the first time (build a module, move it to the device), happens there, not under the capture."""
    sim = CaptureSimulation()

    def watched(*args):
        with sim:
            return kernel(*args)

    apply_impls(registry, {op: kernel})
    warm = bench.runner(cuda_graph=False)
    for _ in range(warmup):
        warm.step()
    bench.reset()
    apply_impls(registry, {op: watched})
    step = bench.runner(cuda_graph=False)
    try:
        step.step()
    except CaptureBreak:
        pass
    finally:
        bench.reset()
    return sim.violations[0] if sim.violations else None


# -- results -------------------------------------------------------------------------------------------

@dataclass
class SettingResult:
    kind: str  # "decode" | "prefill"
    batch: int
    length: int  # the context (decode) or the prompt length (prefill)
    graphs: str  # "on": captured and replayed; "simulated": CPU, eager steps, capture simulated; "off"
    verdict: str = "skipped"  # "pass" | "fail" | "skipped"
    reason: str | None = None  # when failed: graph_capture | logits | kernel_error | slower
    detail: str = ""
    baseline: Timing | None = None
    kernel: Timing | None = None
    comparison: Comparison | None = None
    logits_err: float | None = None
    logits_budget: float | None = None
    pinned: tuple[str, ...] = ()  # ops replayed at the baseline's outputs in every run of the setting
    # The op's calls in one step of the setting: how many lie inside the shapes and dtypes the judge passed
    # (an exported package runs the kernel there, the model's own op elsewhere), and how many in all.
    calls_judged: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} B={self.batch} {'L' if self.kind == 'decode' else 'S'}={self.length}"

    def fail(self, reason: str, detail: str) -> "SettingResult":
        self.verdict, self.reason, self.detail = "fail", reason, detail
        return self

    def to_json(self) -> dict:
        return {
            "kind": self.kind, "batch": self.batch, "length": self.length, "graphs": self.graphs,
            "verdict": self.verdict, "reason": self.reason, "detail": self.detail,
            "baseline_us": self.baseline.median_us if self.baseline else None,
            "baseline_iqr_us": self.baseline.iqr_us if self.baseline else None,
            "kernel_us": self.kernel.median_us if self.kernel else None,
            "kernel_iqr_us": self.kernel.iqr_us if self.kernel else None,
            "ratio": self.comparison.ratio if self.comparison else None,
            "noise": self.comparison.noise if self.comparison else None,
            "p_slower": self.comparison.p_slower if self.comparison else None,
            "batches": self.baseline.batches if self.baseline else None,
            "steps_per_batch": [self.baseline.steps_per_batch, self.kernel.steps_per_batch] if self.kernel else None,
            "logits_err": self.logits_err, "logits_budget": self.logits_budget, "pinned": list(self.pinned),
            "calls_judged": list(self.calls_judged) if self.calls_judged else None,
        }


@dataclass
class GateResult:
    run: str
    workload: str
    op: str
    size: str
    device: str
    device_name: str
    attempt: dict
    settings: list[SettingResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    grid: GateGrid | None = None
    error: str | None = None  # the kernel could not even be loaded here
    wall_s: float = 0.0
    gate_file: str | None = None

    @property
    def passed(self) -> bool:
        ran = [s for s in self.settings if s.verdict != "skipped"]
        return (self.error is None and bool(ran) and all(s.verdict == "pass" for s in ran)
                and not self.runs_nowhere)

    @property
    def runs_nowhere(self) -> bool:
        """No call of the op in any setting lies inside the shapes and dtypes the judge passed: the gate
        timed the kernel on calls an exported package would give the model's own op, so its speed says
        nothing about what ships (an fp32 model with a kernel judged in bf16 only, say)."""
        counted = [s.calls_judged for s in self.settings if s.verdict != "skipped" and s.calls_judged]
        return bool(counted) and all(inside == 0 for inside, _ in counted) and any(total for _, total in counted)

    @property
    def reasons(self) -> list[dict]:
        out = [{"code": "kernel_error", "detail": self.error}] if self.error else []
        if self.runs_nowhere:
            out.append({"code": "no_judged_calls", "detail": f"none of the model's calls of {self.op} lies inside "
                        "the shapes and dtypes the judge passed, so an exported package would never run the kernel "
                        "(judge the task at the model's shapes and dtype)"})
        out += [{"code": s.reason, "detail": f"{s.label}: {s.detail}"} for s in self.settings if s.verdict == "fail"]
        return out

    def to_json(self) -> dict:
        return {"run": self.run, "workload": self.workload, "op": self.op, "size": self.size, "device": self.device,
                "device_name": self.device_name, "verdict": "pass" if self.passed else "fail", "passed": self.passed,
                "reasons": self.reasons, "attempt": self.attempt, "settings": [s.to_json() for s in self.settings],
                "grid": _grid_json(self.grid) if self.grid else None,
                "notes": self.notes, "wall_s": self.wall_s, "gate_file": self.gate_file}


def _grid_json(grid: GateGrid) -> dict:
    return {"contexts": list(grid.contexts), "batches": list(grid.batches),
            "prefill": [list(p) for p in grid.prefill], "extra_contexts": list(grid.extra_contexts)}


def covers_default_grid(gate: dict, size: str) -> bool:
    """Whether a recorded gate measured at least the default grid of ``size`` (its contexts, batches and
    prefills): only such a gate promotes a kernel, not one on a hand-picked easy corner."""
    return covers_grid(gate, default_grid(size))


def covers_grid(gate: dict, want: GateGrid) -> bool:
    """Whether a recorded gate measured at least ``want``'s contexts, batches and prefills."""
    grid = gate.get("grid") or {}
    prefill = {tuple(p) for p in grid.get("prefill", [])}
    return (set(want.contexts) <= set(grid.get("contexts", [])) and set(want.batches) <= set(grid.get("batches", []))
            and set(want.prefill) <= prefill)


def gates_dir_for(ledger_path: str | Path) -> Path:
    """Gate outcomes live next to the ledger: ``<ledger dir>/gates/``."""
    return Path(ledger_path).parent / "gates"


def gate_path(gates_dir: Path, run: str, workload: str, size: str, device: str) -> Path:
    """The gate file of a run on MODEL ``workload``: a built-in name as it is, any other MODEL by its
    ``model_key`` (a path or module:function has characters a file name cannot hold)."""
    from ratchet.e2e.models import ModelError, model_key

    try:
        key = model_key(workload)
    except ModelError:
        key = workload
    return Path(gates_dir) / f"{run}-{key}-{size}-{device}.json"


def read_gate(gates_dir: Path, run: str, workload: str, size: str, device: str) -> dict | None:
    path = gate_path(gates_dir, run, workload, size, device)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    from ratchet.hardware.detect import cpu_model

    return cpu_model() or platform.processor() or "cpu"


# -- the gate ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GateRequest:
    run: str
    workload: str
    size: str
    device: str
    grid: GateGrid
    seed: int = 0


class _KernelFailed(Exception):
    """The candidate's side raised (the baseline's side ran the same code without it)."""


class _BaselineFailed(Exception):
    """The baseline's side raised: the workload itself is broken here."""


def _side(fn: Callable, failure: type[Exception]) -> Callable:
    """``fn`` with its exceptions relabelled; both sides of a comparison get the same wrapper, so the same
    Python overhead."""
    def call():
        try:
            return fn()
        except Exception as exc:
            raise failure(f"{type(exc).__name__}: {exc}") from exc
    return call


class _Gate:
    def __init__(self, request: GateRequest, op: str, kernel: Callable, policy: StepTimingPolicy,
                 task_path: str | None = None, ranges: dict | None = None) -> None:
        self.req, self.op, self.kernel, self.policy = request, op, kernel, policy
        self.ranges = ranges  # the kept attempt's judged ranges (export.shape_ranges)
        self.cuda = request.device == "cuda"
        self.model = load_model(request.workload, size=request.size, device=request.device, seed=request.seed,
                                registry=OpRegistry())
        if not getattr(self.model, "decodes", True):
            raise GateError(f"{request.workload} is a forward-only module (no decode step, no KV cache): the gate "
                            f"needs a decoder (a built-in workload or a transformers causal LM)")
        self.ops = self.model.ops
        self.route = route_into(self.model, op, task_path) if task_path is not None else None
        self.task = load_task(task_path or op)
        self.top_p = TOP_P if op in SAMPLING_OPS else None
        self.pins: dict = {}  # ops replaced by a replay of the baseline's outputs (pin_routing)

    @property
    def base(self) -> dict:
        return dict(self.pins)

    @property
    def cand(self) -> dict:
        return {**self.pins, self.op: self.kernel}

    # -- helpers ---------------------------------------------------------------------------------------
    def check_op_is_called(self) -> None:
        bench = DecodeBench(self.model, 1, 8, slack=4, seed=self.req.seed, top_p=self.top_p)
        apply_impls(self.ops, self.base)
        with self.ops.record() as calls:
            bench.runner(cuda_graph=False).step()
        if not any(c.task == self.op for c in calls):
            called = ", ".join(sorted({c.task for c in calls}))
            raise GateError(f"the {self.req.workload} workload never calls op '{self.op}' (it calls: {called}); "
                            f"there is nothing to gate")

    def perturbed(self, draw: int) -> Callable:
        """The reference op with every float output moved to the edge of the task's tolerance (signs from
        draw number ``draw``)."""
        ref = self.ops.reference_of(self.op)
        g = torch.Generator(device=self.model.device).manual_seed(self.req.seed + 7 + 1000 * draw)
        tolerances = self.task.tolerances

        def nudge(t):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                return t
            tol = tolerances.get(t.dtype) or DEFAULT_TOLERANCES.get(t.dtype)
            if tol is None:
                return t
            sign = torch.randint(0, 2, t.shape, generator=g, device=t.device).to(torch.float32).mul_(2).sub_(1)
            wide = t.float()
            return (wide + sign * (tol.atol + tol.rtol * wide.abs())).to(t.dtype)

        def call(*args):
            out = ref(*args)
            return tuple(nudge(o) for o in out) if isinstance(out, tuple) else nudge(out)

        return call

    def perturbations(self, run: Callable, reset: Callable) -> list[torch.Tensor]:
        """The logits of ``run`` with the op at the tolerance edge, one per draw of the signs."""
        return [self.one(run, {**self.pins, self.op: self.perturbed(draw)}, reset)
                for draw in range(PERTURBATION_DRAWS)]

    def pin_routing(self, run: Callable, reset: Callable) -> None:
        """Freeze a MoE router's decisions at the baseline's for this setting: every later run (baseline,
        kernel, tolerance-edge draws, timing) gets, at each moe_route call of a step, what the reference
        router chose there in one eager baseline run. A router's top-k turns a change far inside any
        tolerance into a jump of the logits when a near-tie flips an expert (an exact fp32 rmsnorm moved
        the full deepseek's logits 0.71 where one tolerance-edge draw moved them 0.06 and another 1.05;
        H200, 2026-12-01, aligned e2e caches): with the routing fixed, the logits compare the kernel, not the luck
        of a tie. Nothing is pinned when the op under test is the router itself."""
        self.pins = {}
        if self.op == ROUTER_OP:
            return
        router = reference(ROUTER_OP)
        recorded: list[tuple[torch.Tensor, ...]] = []

        def recording(*args):
            out = router(*args)
            recorded.append(tuple(t.clone() for t in out))
            return out

        self.one(run, {ROUTER_OP: recording}, reset)
        if not recorded:  # the workload has no router
            return
        position = [0]  # which of a step's router calls comes next; every step makes all of them

        def replay(*args):
            out = recorded[position[0] % len(recorded)]
            position[0] += 1
            return tuple(t.clone() for t in out)

        self.pins = {ROUTER_OP: replay}

    def logits_check(self, res: SettingResult, base1, base2, cand, base_e, perts, cand_tokens=None) -> bool:
        res.logits_err = err = _max_abs(cand, base1)
        res.logits_budget = budget = logits_budget(base1, base2, base_e, perts)
        if bool((~torch.isfinite(cand) & torch.isfinite(base1)).any()):
            res.fail("logits", "non-finite logits with the kernel where the baseline's are finite")
            return False
        if cand_tokens is not None:
            vocab = self.model.config.vocab
            if not bool(((cand_tokens >= 0) & (cand_tokens < vocab)).all()):
                res.fail("logits", f"the kernel drew token ids outside [0, {vocab})")
                return False
        if not err <= budget:
            res.fail("logits", f"logits differ by {err:.3g} (allowed {budget:.3g}: {LOGITS_MARGIN:g}x what the "
                               f"task's tolerance moves them, plus the baseline's own spread)")
            return False
        return True

    def timed(self, res: SettingResult, base_run: Callable, cand_run: Callable, reset: Callable) -> None:
        def prepare(impls):
            def go():
                apply_impls(self.ops, impls)
                reset()
            return go

        entries = [Entry("baseline", _side(base_run, _BaselineFailed), prepare(self.base)),
                   Entry("kernel", _side(cand_run, _KernelFailed), prepare(self.cand))]
        res.baseline, res.kernel = time_interleaved(entries, self.req.device, self.policy, seed=self.req.seed)
        res.comparison = c = compare(res.baseline, res.kernel, self.policy)
        if c.slower:
            res.fail("slower", f"{100 * (c.ratio - 1):.1f}% slower with the kernel (noise {100 * c.noise:.1f}%, "
                               f"p={c.p_slower:.2g})")
        else:
            res.verdict = "pass"

    def count_judged(self, res: SettingResult, run: Callable, reset: Callable) -> None:
        """One baseline step, recorded: how many of the op's calls lie inside the judged ranges."""
        if self.ranges is None:
            return
        with self.ops.record() as calls:
            self.one(run, self.base, reset)
        mine = [c for c in calls if c.task == self.op]
        dims, dtypes = self.ranges["dims"], self.ranges["dtypes"]
        inside = sum(1 for c in mine if str(c.dtype).removeprefix("torch.") in dtypes and all(
            k in dims and dims[k][0] <= v <= dims[k][1] for k, v in c.shape.items()))
        res.calls_judged = (inside, len(mine))

    def one(self, run: Callable, impls: dict, reset: Callable):
        apply_impls(self.ops, impls)
        reset()
        out = run()
        return out.detach().float().clone()

    # -- settings --------------------------------------------------------------------------------------
    def decode(self, batch: int, context: int) -> SettingResult:
        res = SettingResult("decode", batch, context, "on" if self.cuda else "simulated")
        bench = DecodeBench(self.model, batch, context, slack=self.policy.max_steps + 4, seed=self.req.seed,
                            top_p=self.top_p)
        eager = bench.runner(cuda_graph=False)  # the routing's recording and the tolerance-edge draws run eager
        self.pin_routing(eager.step, bench.reset)
        res.pinned = tuple(self.pins)
        apply_impls(self.ops, self.base)
        try:
            base_step = bench.runner(cuda_graph=self.cuda)
        except GraphCaptureError as exc:
            raise GateError(f"the {self.req.workload} decode step cannot be captured even without the kernel: "
                            f"{exc}") from None
        apply_impls(self.ops, self.cand)
        if self.cuda:
            try:
                cand_step = bench.runner(cuda_graph=True)
            except GraphCaptureError as exc:
                return res.fail("graph_capture", str(exc))
            except Exception as exc:
                return res.fail("kernel_error", f"while capturing: {type(exc).__name__}: {exc}")
        else:
            try:
                why = simulate_capture(bench, self.ops, self.op, self.kernel)
            except Exception as exc:
                return res.fail("kernel_error", f"{type(exc).__name__}: {exc}")
            if why:
                return res.fail("graph_capture", f"the kernel would break CUDA graph capture in op '{self.op}' "
                                                 f"(simulated on the CPU): {why}")
            cand_step = bench.runner(cuda_graph=False)
        base1 = self.one(base_step.step, self.base, bench.reset)
        base2 = self.one(base_step.step, self.base, bench.reset)
        try:
            cand = self.one(cand_step.step, self.cand, bench.reset)
            cand_tokens = bench.tokens.clone() if self.top_p is not None else None
        except Exception as exc:
            return res.fail("kernel_error", f"{type(exc).__name__}: {exc}")
        base_e = self.one(eager.step, self.base, bench.reset) if self.cuda else base1
        self.count_judged(res, eager.step, bench.reset)
        perts = self.perturbations(eager.step, bench.reset)
        if not self.logits_check(res, base1, base2, cand, base_e, perts, cand_tokens):
            return res
        try:
            self.timed(res, base_step.step, cand_step.step, bench.reset)
        except _KernelFailed as exc:
            return res.fail("kernel_error", str(exc))
        return res

    def prefill(self, batch: int, length: int) -> SettingResult:
        res = SettingResult("prefill", batch, length, "off")
        tokens = random_tokens(self.model, batch, length, self.req.seed + 2)
        cache = self.model.new_cache(batch, length)

        def run():
            return self.model.prefill(tokens, cache)

        def nothing():
            pass

        self.pin_routing(run, nothing)
        res.pinned = tuple(self.pins)
        base1 = self.one(run, self.base, nothing)
        base2 = self.one(run, self.base, nothing)
        try:
            cand = self.one(run, self.cand, nothing)
        except Exception as exc:
            return res.fail("kernel_error", f"{type(exc).__name__}: {exc}")
        self.count_judged(res, run, nothing)
        perts = self.perturbations(run, nothing)
        if not self.logits_check(res, base1, base2, cand, base1, perts):
            return res
        try:
            self.timed(res, run, run, nothing)
        except _KernelFailed as exc:
            return res.fail("kernel_error", str(exc))
        return res


def logits_budget(base1: torch.Tensor, base2: torch.Tensor, base_e: torch.Tensor, perts: list[torch.Tensor]) -> float:
    """How far the kernel's logits may be from the baseline's: LOGITS_MARGIN times the most a
    tolerance-edge draw moved them (from ``base_e``, the baseline on the same path as the draws), plus
    the baseline's own repeat-to-repeat spread."""
    return LOGITS_MARGIN * max(_max_abs(p, base_e) for p in perts) + _max_abs(base2, base1)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = (a - b).abs()
    diff = diff[torch.isfinite(diff)]
    return float(diff.max()) if diff.numel() else 0.0


def _cache_bytes(model, batch: int, length: int) -> int:
    size = torch.empty((), dtype=model.config.dtype).element_size()
    total = 0
    for shape, shared in model.cache_shapes(batch, length):
        total += math.prod(shape) * size * (1 if shared else 2)
    return total


def _free_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    import psutil

    return psutil.virtual_memory().available


def _fits(model, batch: int, context: int, slack: int, device: str) -> bool:
    """Whether a setting's cache fits with room to spare: the cache, a random fill's temporary of one
    layer's tensor, and the attention's work space (a generous quarter of the cache again)."""
    need = _cache_bytes(model, batch, context + slack) * 1.5 + 512 * 2**20
    return need <= 0.9 * _free_bytes(device)


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def gated_best(ledger: Ledger, run_id: str, device: str) -> dict | None:
    """The kept kernel the gate puts into the model: the run's best timed on this machine's kind of
    device, when it has one (a run judged on a cluster keeps one best per GPU kind), else its latest best."""
    from ratchet.hardware.ceilings import device_identity

    try:
        here = device_identity(device)[0]
    except Exception:  # no such device here: the gate says so when it runs the model
        here = None
    return (ledger.best(run_id, device_name=here) if here else None) or ledger.best(run_id)


def run_gate(ledger: Ledger, request: GateRequest, gates_dir: Path, *, policy: StepTimingPolicy | None = None,
             progress: Callable[[str], None] = lambda line: None) -> GateResult:
    """Gate the best kernel of ``request.run`` on its workload; writes and returns the outcome."""
    started = time.monotonic()
    run = ledger.get_run(request.run)
    op = run["task"]
    task_path = None  # a module task's file: its kernel replaces a whole module of the model
    if op not in OPS:
        if not is_module_task(run["task_path"]):
            raise GateError(f"run '{request.run}' is on task '{op}', which is no workload op "
                            f"(ops: {', '.join(OPS)}) and no module task; there is nothing to gate")
        task_path = run["task_path"]
    best = gated_best(ledger, request.run, request.device)
    if best is None:
        raise GateError(f"run '{request.run}' has no kept kernel yet; nothing to gate")
    policy = policy or policy_for(request.device)
    result = GateResult(run=request.run, workload=request.workload, op=op, size=request.size, device=request.device,
                        device_name=device_name(request.device), grid=request.grid,
                        attempt={"id": best["id"], "seq": best["seq"], "source_sha256": best["source_sha256"],
                                 "config": best["config"], "config_key": config_key(best["config"]),
                                 "speedup": best["speedup"]})
    earlier = read_gate(gates_dir, request.run, request.workload, request.size, request.device)
    if earlier is not None:  # one outcome per run, model, size and device: the stack and export read the last
        g = earlier.get("grid") or {}
        result.notes.append(f"replaces the earlier gate of this run on this model ({earlier.get('verdict')}, "
                            f"{earlier.get('gated_at', 'undated')}, contexts {g.get('contexts')}, batches "
                            f"{g.get('batches')}, prefill {g.get('prefill')})")
    if request.device == "cpu":
        result.notes.append("CPU: no CUDA graphs, so decode steps run eagerly and graph capture is simulated; "
                            "CPU timings say nothing about GPUs")
    with tempfile.TemporaryDirectory(prefix="ratchet-gate-") as tmp:
        path = Path(tmp) / f"kernel_{best['source_sha256'][:12]}.py"
        path.write_text(best["source"])
        try:
            kernel = load_kernel(path, best["config"])
        except Exception as exc:  # the judge passed it elsewhere; here it cannot even load
            result.error = f"the kernel does not load here: {type(exc).__name__}: {exc}"
        if result.error is None:
            # No judged shapes on record (a kernel recorded by hand): nothing to count the calls against.
            ranges = shape_ranges(best) if best.get("shapes") else None
            _run_settings(result, request, op, kernel, policy, progress, task_path, ranges)
    result.wall_s = time.monotonic() - started
    result.gate_file = str(_write(result, gates_dir))
    return result


def route_into(model, op: str, task_path: str):
    """Route ``model``'s modules of module task ``task_path`` through its op ``op`` (the gate's and the
    stack's model, loaded afresh); GateError when the model cannot take the kernel."""
    hf = getattr(model, "hf", None)
    if hf is None:
        raise GateError(f"{op} is a module task; its kernel goes into a transformers model, and this workload "
                        f"is a built-in one")
    try:
        return route_module(hf, model.ops, op, task_path)
    except ModuleRouteError as exc:
        raise GateError(str(exc)) from None


def _run_settings(result: GateResult, request: GateRequest, op: str, kernel: Callable, policy: StepTimingPolicy,
                  progress: Callable[[str], None], task_path: str | None = None, ranges: dict | None = None) -> None:
    gate = _Gate(request, op, kernel, policy, task_path, ranges)
    if gate.route is not None:
        result.notes.append(f"module op: the kernel runs {len(gate.route.routed)} {gate.route.module_class} "
                            f"module(s) of the model ({', '.join(gate.route.routed[:4])}"
                            f"{', ...' if len(gate.route.routed) > 4 else ''})")
    gate.check_op_is_called()
    grid, slack = request.grid, policy.max_steps + 4
    plan: list[tuple[str, int, int]] = []
    for context in sorted(set(grid.contexts) | set(grid.extra_contexts)):
        for batch in grid.batches:
            if context in grid.contexts and not _fits(gate.model, batch, context, slack, request.device):
                raise GateError(f"decode at batch {batch}, context {context} does not fit in this device's free "
                                f"memory; choose smaller --contexts or --batches")
            if context not in grid.contexts and not _fits(gate.model, batch, context, slack, request.device):
                result.notes.append(f"decode B={batch} L={context} skipped: not enough memory")
                continue
            plan.append(("decode", batch, context))
    plan += [("prefill", b, s) for b, s in grid.prefill]
    stopped = None
    for kind, batch, length in plan:
        if stopped:
            skipped = SettingResult(kind, batch, length, "off" if kind == "prefill" else
                                    ("on" if gate.cuda else "simulated"), detail=f"skipped: {stopped}")
            result.settings.append(skipped)
            continue
        progress(f"gate {request.run}: {kind} B={batch} {'L' if kind == 'decode' else 'S'}={length} ...")
        try:
            res = gate.decode(batch, length) if kind == "decode" else gate.prefill(batch, length)
        except torch.OutOfMemoryError as exc:
            raise GateError(f"out of memory at {kind} B={batch} length {length}: {str(exc).splitlines()[0]}") from None
        except _BaselineFailed as exc:
            raise GateError(f"the {request.workload} workload failed without the kernel at {kind} B={batch} "
                            f"length {length}: {exc}") from None
        except (GateError, KeyboardInterrupt):
            raise
        except Exception as exc:  # the model itself, outside a timed side: one line that says where
            raise GateError(f"the {request.workload} workload failed at {kind} B={batch} length {length}: "
                            f"{model_failure(exc)}") from None
        finally:
            _release(request.device)
        result.settings.append(res)
        progress(f"  {res.verdict}" + (f" ({res.reason}: {res.detail})" if res.reason else ""))
        if res.calls_judged and res.calls_judged[0] < res.calls_judged[1]:
            inside, total = res.calls_judged
            result.notes.append(f"{res.label}: {inside} of {total} calls of {op} in a step lie inside the shapes the "
                                f"judge passed; the gate ran the kernel on all of them, an exported package runs the "
                                f"model's own op on the other {total - inside} (to judge such shapes, give the task "
                                f"them: for an extracted task, 'ratchet profile' at that --batch or --prefill)")
        if res.verdict == "fail" and res.reason != "slower":
            stopped = f"an earlier setting failed ({res.reason})"
    apply_impls(gate.ops, {})


def _write(result: GateResult, gates_dir: Path) -> Path:
    path = gate_path(gates_dir, result.run, result.workload, result.size, result.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**result.to_json(), "gated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    data["gate_file"] = str(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)  # atomic: a reader sees the old outcome or the new one, never half of one
    return path
