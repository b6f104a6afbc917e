"""One evaluation: correctness on every shape and dtype, then interleaved timing. TRUSTED.

The reference's outputs exist only here; the candidate runs in its worker, the reference (for timing)
in a worker of its own. Inputs come from a fresh secret seed per call, which this process also uses to
remake the same inputs for checking.

Phase order (docs/judge.md): the candidate's worker starts and imports; correctness is checked first on
the smallest public shape at the task's first dtype, so a wrong kernel fails before the other compiles
and shapes; only then does the reference's worker start (it imports while the other shapes and dtypes
are checked); timing goes heaviest shape first, and with a race bar (judge.race) a candidate clearly
slower than the run's best there is no longer timed.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from ratchet.candidate import Candidate
from ratchet.hardware.ceilings import JUDGE_CPU_THREADS, device_identity
from ratchet.judge.check import (as_tuple, check_dtypes, check_structure, check_values, inputs_unchanged,
                                 tensor_from_description)
from ratchet.judge import box
from ratchet.judge.device_lock import holding
from ratchet.judge.guards import suspect_source
from ratchet.judge.race import RaceBar, race_decision
from ratchet.judge.process import Limits, WorkerFailure, WorkerProcess
from ratchet.judge.worker import sample_indices
from ratchet.judge.timing import (CPU_POLICY, GPU_POLICY, HOST_PARTS, MAX_HOLD_SCALE, CallCosts, TimingPolicy,
                                  launch_exposed, starting_hold_scale, summarize, too_many_exposed)
from ratchet.judge.verdict import ERROR_CODES, FAIL_CODES, Reason, ShapeResult, Verdict, verdict_from_reasons
from ratchet.task import StatisticalRule, Task

# A measured time under the roofline floor by more than this factor is impossible, not fast: measured
# ceilings are a few percent under the true peak (a read-mostly kernel beats a copy by a little).
ROOFLINE_SLACK = 1.15
# Against ceilings that could not be trusted (measured while other processes kept the cores busy, never
# cached), only a time this far under the floor is refused: a one-thread best-of measurement on a busy
# machine reads a few times low at worst (time slices interrupt some repeats, not all), while a faked
# time is orders of magnitude under.
UNTRUSTED_ROOFLINE_SLACK = 4.0
# Fresh measurements tried for a trusted one before a shape is judged against the roofline.
RECHECK_ATTEMPTS = 3
# Wall time the outside clock may see beyond the kernel's own timers and the reference's overhead,
# before the difference is called hidden work (side streams, threads, patched clocks).
CLOCK_SLACK_US = {"cpu": 1000.0}  # on CUDA the device clock is used instead (_clock_check)
# On the CPU, also this many times the summed IQRs of both workers' per-call overheads (a busy machine).
CLOCK_SPREAD_FACTOR = 2.0
# On a CPU machine with every core taken (1-minute load average at least the core count), at least this:
# each wake-up of a worker then waits for a time slice, which shifted even the lower quartile of an
# honest candidate's per-call overhead 1008 us above the reference's with their IQRs adding to 13 us
# (2026-12-02, the rmsnorm CPU seed, two test suites at once on two cores), so the spread rule alone
# does not cover it. Hidden work is still caught beyond this, and a task's real times are a GPU's.
BUSY_CLOCK_SLACK_US = 4000.0
# On the CPU a Triton candidate runs in Triton's interpreter, every program of a launch in Python: a call
# takes seconds, and on cores other work keeps busy several times more (a top-p seed's call passed 10 s
# in the suite beside a second job, 2026-12-03). Its running limits are this many times the others'; a
# hang in such a candidate costs that much longer to be stopped.
INTERPRETER_LIMIT_FACTOR = 6.0

# On CUDA the device's own clock gives a tighter check: the time from the kernel's end event to the
# end of all device work (after a device-wide synchronize), against the reference's.
# 20 us falsely rejected honest Triton kernels on the H200 (medians 57 and 85 us apart, 2026-11-30).
GAP_SLACK_US = 100.0
# Address space a CPU worker may map beyond its RSS limit (torch's and Triton's libraries, thread stacks).
ADDRESS_SPACE_HEADROOM = 8 * 2**30
# Elements of each output checked per verified timed call (all of them when the output is smaller).
SAMPLED_ELEMENTS = 1 << 16
# Correctness calls sent to the worker in one message (each with its own seed and checks).
CHECK_BATCH = 64


@dataclass(frozen=True)
class JudgeOptions:
    device: str = "cpu"
    policy: TimingPolicy | None = None
    limits: Limits = field(default_factory=Limits)
    allow: tuple[str, ...] = ()  # forbidden ops the user allows
    time_it: bool = True
    ceilings: Any = None  # hardware.ceilings.Ceilings; measured when None
    gpu_index: int | None = None  # which GPU (workers see only it); None: the current one
    guards: bool = True  # False only to measure what the guards cost: never for a real verdict
    # Check these shapes (each at every dtype) instead of the task's public and held-out ones: a
    # correctness-only diagnostic (refused with time_it), e.g. to repeat a held-out shape that failed.
    shapes: tuple[dict, ...] = ()
    # Evaluations sharing a GPU (ratchet.run.loop): a judge.device_lock.DeviceLock, held shared for the
    # checks after the candidate's first call (which compiles, unlocked) and exclusively for each shape's
    # timing, so checks and compiles of several candidates overlap and nothing runs beside a timing.
    device_lock: Any = None
    # The run's best at its heaviest shapes (judge.race.RaceBar, plain numbers): a candidate beyond it
    # is no longer timed (verdict pass, raced). None: every candidate runs the whole protocol.
    race: RaceBar | None = None
    # Called in this process (never the candidate's) with a JudgeProgress at each phase and shape, between
    # timed regions: what a display shows while an attempt is judged. Its exceptions are ignored.
    progress: Callable[["JudgeProgress"], None] | None = None


@dataclass(frozen=True)
class JudgeProgress:
    """Where an evaluation is: phase "import" (workers start, the candidate is imported), "correctness"
    or "timing"; ``detail`` names the shape; ``step`` of ``steps`` counts the phase's shapes."""

    candidate: str
    config: dict
    phase: str
    detail: str
    step: int
    steps: int
    elapsed_s: float


def software_versions(device: str) -> dict[str, str]:
    """torch's and Triton's versions here (the workers are this interpreter's), and CUDA's on a GPU."""
    versions = {"torch": torch.__version__}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    if device == "cuda" and torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    return versions


class Abort(Exception):
    """Stop the evaluation with these reasons."""

    def __init__(self, reasons: list[Reason]):
        self.reasons = reasons


class Evaluation:
    def __init__(self, task: Task, candidate: Candidate, config: dict, options: JudgeOptions):
        self.task, self.candidate, self.config, self.opts = task, candidate, config, options
        self.device = options.device
        # Where this process makes inputs and references: the same GPU the workers see as "cuda".
        self.torch_device = f"cuda:{options.gpu_index}" if options.gpu_index is not None else self.device
        self.policy = options.policy or (GPU_POLICY if self.device == "cuda" else CPU_POLICY)
        self.rng = random.Random(secrets.randbits(64))  # secret: never leaves this process
        self.started = time.perf_counter()
        self.limits = interpreted_limits(options.limits) if self.device == "cpu" and _uses_triton(candidate) \
            else options.limits
        self.deadline = self.started + self.limits.total_s
        self.started_unix = time.time()  # ceilings measured before this are re-checked before a refusal
        self.cand: WorkerProcess | None = None
        self.ref: WorkerProcess | None = None
        self.first_call = True
        self._expected: dict = {}
        self.slowest_ref_s = 0.0  # the slowest reference call checked so far: later calls' limits scale with it
        self.call_costs = CallCosts()  # where the timed calls' wall time went, over all shapes
        self.gpu_wait_s = 0.0  # waiting for the device lock (another evaluation timing, or checking)
        # The correctness phase's wall time by part (waits for the device lock included): the first call
        # (import, compile), the candidate's other calls, and the judge's own references and comparisons;
        # first_launch: the worker's own clock around the first call's launch (Triton's compile is in it),
        # to tell a slow compile from a slow round trip (two GPUs: 12 s against 2.7, 2026-11-30);
        # first_profiled instead when that call was the one run under the profiler (CUPTI starts in it).
        # calls_*: the worker's own clock over the other calls (timing.HOST_PARTS and the fetch of what the
        # judge checks; the rest of "calls" is the pipe); rule_test: a statistical rule's test itself.
        self.correctness_parts = {"first_call": 0.0, "first_launch": 0.0, "first_profiled": 0.0, "calls": 0.0,
                                  **{f"calls_{part}": 0.0 for part in HOST_PARTS + ("fetch",)},
                                  "checks": 0.0, "rule_test": 0.0}
        # Noise-prone checks that failed once and passed when repeated (_check_shape, _time_mode): said in
        # the verdict's notes, whatever the verdict.
        self.confirmations: list[str] = []
        # The shapes checked so far, in the order checked (a failing one last, marked not correct): the
        # shapes of a verdict that ends before timing.
        self.checked: list[ShapeResult] = []

    # -- the whole evaluation --------------------------------------------------------------------
    def run(self) -> Verdict:
        t0, cpu0 = time.perf_counter(), time.thread_time()
        verdict = Verdict("pass", task=self.task.name, candidate=self.candidate.path, config=self.config,
                          device=self.device)
        try:
            if self.opts.shapes and self.opts.time_it:
                raise Abort([Reason("bad_input", "chosen shapes are for correctness-only checks: a time is "
                                                 "judged over the task's own shapes")])
            with self._on_judged_gpu():  # named before anything can fail: a failed attempt says where too
                verdict.device_name = device_identity(self.device)[0]
            verdict.software = software_versions(self.device)
            suspect = suspect_source(self.candidate.source) if self.opts.guards else []
            if suspect:
                raise Abort([Reason("harness_tampered", f"the candidate's source uses {', '.join(suspect)}, "
                                                        "which only code reaching into the judge needs")])
            if box.opted_out():
                verdict.notes.append(f"judged without the box ({box.OPT_OUT_ENV}=1): candidate code could write "
                                     "any file and reach the network")
            elif box.unavailable():
                raise Abort([Reason("box_unavailable", box.refusal())])
            # Each phase's seconds are kept when it fails too: a failed attempt says where its time went.
            mark = time.perf_counter()
            self._report("import", "starting the workers, importing the candidate", 0, 0)
            try:
                self._start_candidate()
            finally:
                verdict.phases_s["start"] = round(time.perf_counter() - mark, 3)
            mark = time.perf_counter()
            try:
                rows = self._correctness()
            finally:
                verdict.phases_s["correctness"] = round(time.perf_counter() - mark, 3)
            if self.opts.time_it:
                mark = time.perf_counter()
                try:
                    self._load_reference()
                    self._timing([r for r in rows if not r.held_out], verdict)
                finally:
                    verdict.phases_s["timing"] = round(time.perf_counter() - mark, 3)
                    verdict.timed_calls = self.call_costs.summary()
                self._raise_on_strays("timing")
            verdict.shapes = rows
        except Abort as abort:
            verdict.reasons = abort.reasons
            verdict.shapes = list(self.checked)
        except WorkerFailure as failure:
            verdict.reasons = [Reason(failure.code, failure.detail)]
            verdict.shapes = list(self.checked)
        finally:
            for worker in (self.cand, self.ref):
                if worker is not None:
                    worker.close()
        verdict.notes.extend(self.confirmations)
        verdict.verdict = verdict_from_reasons(verdict.reasons)
        if verdict.verdict == "pass" and verdict.shapes:
            verdict.speedup = weighted_geomean_speedup(verdict.shapes)
        # Said as soon as it is known: a run judging several at once records them in proposal order, so
        # a verdict can wait there behind an older, slower evaluation.
        outcome = f"{verdict.speedup:.3f}x" if verdict.speedup else ",".join(r.code for r in verdict.reasons[:2])
        self._report("judged", f"{verdict.verdict} {outcome}".strip(), 0, 0)
        verdict.judge_wall_s = round(time.perf_counter() - t0, 3)
        verdict.judge_host_s = {"cpu": round(time.thread_time() - cpu0, 3), "gpu_wait": round(self.gpu_wait_s, 3),
                                # microseconds: a CPU candidate's first launch can be well under 1 ms
                                **{part: round(s, 6) for part, s in self.correctness_parts.items()}}
        return verdict

    def _report(self, phase: str, detail: str, step: int, steps: int) -> None:
        if self.opts.progress is None:
            return
        try:
            self.opts.progress(JudgeProgress(self.candidate.path, self.config, phase, detail, step, steps,
                                             round(time.perf_counter() - self.started, 3)))
        except Exception:  # a display's fault must not change a verdict
            pass

    def _worker_env(self) -> dict:
        # On the CPU, Triton kernels run through Triton's interpreter (slow, but judged the same way).
        # One thread per CPU worker: two workers take turns on a small machine, and OpenMP threads
        # spinning in the idle one made the other's times noisy (docs/NOTES.md).
        env = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": str(JUDGE_CPU_THREADS)} if self.device == "cpu" else {}
        if self.opts.gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.opts.gpu_index)
        return env

    def _new_worker(self, role: str) -> WorkerProcess:
        limits = self.limits
        # On the CPU the worker's address space is capped too (CUDA's driver reserves far more than it uses):
        # a huge allocation fails at once as out_of_memory instead of racing the RSS watch.
        space = limits.rss_bytes + ADDRESS_SPACE_HEADROOM if self.device == "cpu" else None
        return WorkerProcess(limits, role, self._worker_env(), box=not box.opted_out(), address_space=space,
                             device=self.device)

    def _load_message(self) -> dict:
        task_ref = self.task.source_path or self.task.name
        if self.task.source_path and os.path.exists(task_ref):
            task_ref = os.path.abspath(task_ref)  # the worker runs in its scratch folder
        load = {"op": "load", "task": task_ref, "device": self.device}
        if self.device == "cuda":
            from ratchet.judge.timing import LAUNCH_HOLD_US, cycles_for_us

            with torch.cuda.device(self.torch_device):
                load["hold_cycles"] = cycles_for_us(LAUNCH_HOLD_US)
        return load

    def _ask_load(self, worker: WorkerProcess, message: dict) -> dict:
        limits = self.limits
        reply, _ = worker.ask(message, limits.import_s + limits.compile_s, run_s=limits.import_s,
                              limit_name="import limit")
        return reply

    def _start_candidate(self):
        self.cand = self._new_worker("candidate")
        self._raise_on_error(self._ask_load(self.cand, dict(
            self._load_message(), candidate=os.path.abspath(self.candidate.path), kind=self.candidate.kind,
            config=self.config)))

    def _start_reference(self):
        """Start the reference's worker (for timing): it imports while the candidate is checked further."""
        if self.opts.time_it and self.ref is None:
            self.ref = self._new_worker("reference")

    def _load_reference(self):
        self._start_reference()
        reply = self._ask_load(self.ref, dict(self._load_message(), candidate=None))
        if "error" in reply:
            raise Abort([Reason("reference_error", f"reference worker: {reply['detail']}")])

    def _on_judged_gpu(self):
        """Make the GPU this evaluation judges on the current one (ceilings measure "cuda")."""
        return torch.cuda.device(self.torch_device) if self.device == "cuda" else contextlib.nullcontext()

    @contextlib.contextmanager
    def _gpu(self, mode: str):
        asked = time.perf_counter()
        with holding(self.opts.device_lock, mode):
            self.gpu_wait_s += time.perf_counter() - asked
            yield

    # -- correctness -----------------------------------------------------------------------------
    def shapes(self) -> list[tuple[dict, bool]]:
        if self.opts.shapes:
            return [(dict(s), False) for s in self.opts.shapes]
        shape_set = self.task.shape_set(self.device)
        public = [(dict(s), False) for s in shape_set.public]
        held = [(s, True) for s in shape_set.held_out.draw(self.rng)] if shape_set.held_out else []
        return public + held

    def _correctness(self) -> list[ShapeResult]:
        """Every shape at every dtype, the smallest public shape at the first dtype first: most wrong
        kernels are wrong there too, and fail before the other compiles (dtypes) and the larger shapes.
        The rows keep the declared order (dtype by dtype, public shapes then held-out ones)."""
        plan = [(dtype, shape, held_out) for dtype in self.task.dtypes for shape, held_out in self.shapes()]
        first_dtype = self.task.dtypes[0]
        first = min((i for i, (dtype, _, held_out) in enumerate(plan) if dtype == first_dtype and not held_out),
                    key=lambda i: self._size(plan[i][1], first_dtype))
        rows: list[ShapeResult | None] = [None] * len(plan)
        for step, i in enumerate([first] + [i for i in range(len(plan)) if i != first]):
            dtype, shape, held_out = plan[i]
            first = " (first call: compile)" if self.first_call else ""
            self._report("correctness", f"{'held-out ' if held_out else ''}shape {shape} "
                         f"{str(dtype).removeprefix('torch.')}{first}", step + 1, len(plan))
            row = ShapeResult(shape=shape, dtype=str(dtype).removeprefix("torch."), held_out=held_out,
                              weight=self.task.shape_weight(shape))
            try:
                self._check_shape(shape, dtype, held_out)
            except Abort:
                # A failed verdict lists what was found right before it, and where it went wrong: an agent
                # repeats the failing shape alone (`ratchet eval --shape`) and knows which ones passed.
                self.checked.append(replace(row, correct=False))
                raise
            self.checked.append(row)
            rows[i] = row
            if step == 0:
                self._start_reference()
        return rows

    def _size(self, shape: dict, dtype) -> float:
        return shape_size(self.task, shape, dtype)

    def _check_shape(self, shape: dict, dtype: torch.dtype, held_out: bool):
        rule = self.task.check if isinstance(self.task.check, StatisticalRule) else None
        calls = 2  # two runs on different data
        if rule:
            calls = max(2, min(rule.max_calls, math.ceil(rule.min_draws / max(1, rule.draws(shape)))))
        label = f"{'held-out ' if held_out else ''}shape {shape} {str(dtype).removeprefix('torch.')}"
        # One call per shape, at random, runs under the profiler (forbidden ops): profiling every call
        # cost ~1 s per evaluation on the CPU (docs/NOTES.md).
        profiled = self.rng.randrange(calls) if self.task.forbidden else -1
        pairs = self._check_calls(shape, dtype, calls, label, rule is not None, profiled)
        if not rule:
            return
        details = self._rule_test(rule, pairs)
        if not details:
            return
        # An honest sampler fails the test at its false-reject rate by chance; a biased one fails again on
        # fresh draws. Rejecting only when a second, independent set fails too makes the honest rate the
        # square of the rule's (1e-8 for 1e-4), while a bias the test sees once it sees twice.
        again = self._rule_test(rule, self._check_calls(shape, dtype, calls, label, True, -1))
        if again:
            raise Abort([Reason("statistical", f"{label}: {d} (and on a second, independent set of draws)")
                         for d in again])
        self.confirmations.append(f"{label}: the distribution test failed once ({details[0]}) and passed on a "
                                  "second, independent set of draws")

    def _rule_test(self, rule: StatisticalRule, pairs: list) -> list[str]:
        started = time.perf_counter()
        try:
            return rule.test(pairs)
        finally:
            self.correctness_parts["rule_test"] += time.perf_counter() - started

    def _check_calls(self, shape: dict, dtype: torch.dtype, calls: int, label: str, statistical: bool,
                     profiled: int) -> list:
        """``calls`` calls of the candidate on fresh inputs, each checked against the reference (values) or
        kept as an (inputs, outputs) pair for the statistical rule; call ``profiled`` under the profiler."""
        pairs = []
        while len(pairs) < calls:
            # The first call of an evaluation goes alone: it compiles, and gets the long time limit.
            count = 1 if self.first_call else min(CHECK_BATCH, calls - len(pairs))
            subs = [{"seed": self.rng.getrandbits(62), "rng_seed": self.rng.getrandbits(62),
                     "fingerprint_seed": self.rng.getrandbits(62),
                     "first_of_task": self.first_call, "profile": len(pairs) + i == profiled} for i in range(count)]
            run_s, limit_name = self._run_limit(count)
            first, self.first_call = self.first_call, False
            asked = time.perf_counter()
            # The first call compiles on the CPU cores while another evaluation may be timing. After it,
            # the calls and their checks share one hold of the GPU: each acquisition can wait for one timing
            # hold of another evaluation (device_lock's turns), and two per step would wait twice.
            with contextlib.ExitStack() as held:
                if not first:
                    held.enter_context(self._gpu("shared"))
                reply, _ = self.cand.ask({"op": "batch", "calls": subs, "shape": shape,
                                          "dtype": str(dtype).removeprefix("torch."), "poison": True,
                                          "flush": False, "guards": self.opts.guards},
                                         self._wall_limit(run_s), run_s=run_s, limit_name=limit_name)
                checking = time.perf_counter()
                self.correctness_parts["first_call" if first else "calls"] += checking - asked
                self._raise_on_strays(label)
                if first and reply.get("results"):
                    part = "first_profiled" if subs[0]["profile"] else "first_launch"
                    self.correctness_parts[part] += reply["results"][0].get("host_us", {}).get("launch", 0.0) / 1e6
                if first:  # the references and comparisons run on the judge's GPU
                    held.enter_context(self._gpu("shared"))
                for sub, result in zip(subs, reply["results"]):
                    if not first:
                        for part, us in (result.get("host_us") or {}).items():
                            self.correctness_parts[f"calls_{part}"] += us / 1e6
                    self._raise_on_error(result)
                    self._raise_on_flags(result, label)
                    self._forbidden(result.get("ops"), label)
                    pairs.append(self._verify(shape, dtype, sub["seed"], result, label,
                                              statistical=statistical, fingerprint_seed=sub["fingerprint_seed"]))
            self.correctness_parts["checks"] += time.perf_counter() - checking
        return pairs

    def _verify(self, shape, dtype, seed, fetched, label, statistical: bool, sample: dict | None = None,
                scalars: tuple | None = None, fingerprint_seed: int | None = None):
        """Check one call's outputs (and inputs after the call) against the reference here. ``scalars``:
        the non-tensor arguments a CUDA graph was captured with, which its replays use."""
        inputs = self.make_inputs(shape, dtype, seed)
        if scalars is not None:
            inputs = tuple(x if isinstance(x, torch.Tensor) else c for x, c in zip(inputs, scalars))
        reasons = inputs_unchanged(inputs, fetched.get("inputs_after") or [], label, fingerprint_seed)
        started = time.perf_counter()
        native = self._expected_outputs(shape, dtype, inputs)
        descs = fetched["outputs"]
        reasons += check_structure(descs, native, self.device)
        if not reasons:
            reasons += check_dtypes(descs, [t.dtype for t in native])
        if reasons:
            raise Abort(reasons)
        if statistical:  # the rule's test runs where the judge made the inputs: on a GPU, all rows at once
            return inputs, tuple(tensor_from_description(d, self.torch_device) for d in descs)
        # Values are compared on the judge's device, next to its reference (docs/NOTES.md, 2026-11-30).
        outs = tuple(tensor_from_description(d, self.torch_device) for d in descs)
        upcast = tuple(x.to(self.task.reference_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point()
                       else x for x in inputs)
        refs = tuple(r.to(self.torch_device) for r in as_tuple(self._reference(upcast)))
        self.slowest_ref_s = max(self.slowest_ref_s, time.perf_counter() - started)
        if sample is not None:
            picked = [d.get("sampled") for d in descs]
            refs = tuple(r.flatten()[sample_indices(r.numel(), sample).to(r.device)] if p else r
                         for r, p in zip(refs, picked))
            outs = tuple(o.flatten() if p else o for o, p in zip(outs, picked))
        reasons = check_values(self.task, inputs, outs, refs, dtype, label)
        if reasons:
            raise Abort(reasons)
        return inputs, outs

    def _expected_outputs(self, shape, dtype, inputs) -> tuple:
        """The reference at the task's own dtype, once per shape: the outputs' expected types and shapes."""
        key = (tuple(sorted(shape.items())), str(dtype))
        if key not in self._expected:
            self._expected[key] = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t
                                        for t in as_tuple(self._reference(inputs)))
        return self._expected[key]

    def _reference(self, inputs) -> object:
        """The task's reference in the judge's process; a task whose reference raises is broken, which is
        an `error` verdict with the reference's own message, not a traceback out of the judge."""
        try:
            return self.task.reference(*inputs)
        except Exception as exc:  # noqa: BLE001 - any failure of the task's own code is the task's
            first = (str(exc).strip().splitlines() or [""])[0]
            raise Abort([Reason("reference_error", f"the reference raised {type(exc).__name__}: {first}")]) from None

    def make_inputs(self, shape, dtype, seed) -> tuple:
        generator = torch.Generator(device=self.torch_device).manual_seed(seed)
        return self.task.make_inputs(shape, dtype, self.torch_device, generator)

    def _run_limit(self, count: int = 1) -> tuple[float, str]:
        """The running time (outside compilers) allowed to ``count`` calls, and the limit's name."""
        limits = self.limits
        if self.first_call:
            return limits.first_call_s, "first-call limit"
        per_call = min(limits.call_s, limits.call_floor_s + limits.call_ref_factor * self.slowest_ref_s)
        return per_call * count, "call limit" if count == 1 else f"call limit: {count} calls of {per_call:.1f} s"

    def _wall_limit(self, run_s: float) -> float:
        """Wall time for an ask whose running time is ``run_s``: that plus the compile allowance, within
        the evaluation's own limit."""
        return min(run_s + self.limits.compile_s, max(1.0, self.deadline - time.perf_counter()))

    def _call(self, worker: WorkerProcess, shape, dtype, seed, **options) -> dict:
        run_s, limit_name = self._run_limit()
        msg = {"op": "call", "shape": shape, "dtype": str(dtype).removeprefix("torch."), "seed": seed,
               "rng_seed": self.rng.getrandbits(62), "first_of_task": self.first_call, **options}
        reply, wall = worker.ask(msg, self._wall_limit(run_s), run_s=run_s, limit_name=limit_name)
        if worker is self.cand:
            self.first_call = False
        reply["wall_us"] = wall * 1e6
        self._raise_on_error(reply)
        return reply

    def _call_timed(self, worker: WorkerProcess, shape, dtype, seeds: list[int], **options) -> list[dict]:
        """A batch of timed calls in one message (worker op "timed"): each call as ``_call`` makes it, one
        pipe round trip for all. Each reply's ``wall_us`` is its share of the batch's outside wall time."""
        # No heartbeat here (it would wake inside the timed region): the plain wall limit of these calls.
        budget = min(self._run_limit(len(seeds))[0], max(1.0, self.deadline - time.perf_counter()))
        subs = [{"seed": seed, "rng_seed": self.rng.getrandbits(62)} for seed in seeds]
        msg = {"op": "timed", "calls": subs, "shape": shape, "dtype": str(dtype).removeprefix("torch."),
               "first_of_task": self.first_call, **options}
        reply, wall = worker.ask(msg, budget)
        if worker is self.cand:
            self.first_call = False
        self._raise_on_error(reply)
        results = reply["results"]
        for result in results:
            result["wall_us"] = wall * 1e6 / len(results)
            self._raise_on_error(result)
        return results

    def _raise_on_error(self, reply: dict):
        if "error" in reply:
            code = reply["error"] if reply["error"] in ERROR_CODES or reply["error"] in FAIL_CODES else "worker_error"
            raise Abort([Reason(code, reply.get("detail", ""))])

    def _raise_on_flags(self, reply: dict, label: str):
        reasons = []
        if reply.get("deferred"):
            reasons.append(Reason("deferred_write", f"{label}: an output changed after the kernel returned"))
        for flag in reply.get("flags") or []:
            code, _, detail = flag.partition(":")
            reasons.append(Reason(code, f"{label}: {detail}"))
        if reasons:
            raise Abort(reasons)

    def _raise_on_strays(self, label: str):
        """A process that left the worker's tree is invisible to the worker's census; its keeper sees it."""
        strays = self.cand.strays() if self.opts.guards else []
        if strays:
            raise Abort([Reason("child_process", f"{label}: {len(strays)} process(es) left the worker's process "
                                                 "tree (a double fork or setsid); the judge ended them")])

    def _forbidden(self, ops, label):
        if not ops:
            return
        banned = set(self.task.forbidden) - set(self.opts.allow)
        ran = sorted(banned.intersection(ops))
        if ran:
            raise Abort([Reason("forbidden_call", f"{label}: ran {', '.join(ran)} (allow with --allow {ran[0]})")])

    # -- timing ----------------------------------------------------------------------------------
    def _timing(self, rows: list[ShapeResult], verdict: Verdict):
        from ratchet.hardware.ceilings import get_ceilings

        with self._gpu("exclusive"), self._on_judged_gpu():  # measured alone on the GPU being judged
            ceilings = self.opts.ceilings or get_ceilings(self.device)
        verdict.device_name = ceilings.device_name  # _roofline updates these when it re-measures
        verdict.ceilings = {"copy_tbps": ceilings.copy_tbps, "matmul_tflops": ceilings.matmul_tflops}
        if self.device == "cpu":
            verdict.notes.append("CPU times (one thread per worker) say nothing about GPU speed")
        timed = []
        for i, row in enumerate(self._timing_order(rows)):
            self._report("timing", f"shape {row.shape} {row.dtype}", i + 1, len(rows))
            timed.append(row)
            dtype = getattr(torch, row.dtype)
            with self._gpu("exclusive"):
                eager = self._time_mode(row.shape, dtype, "eager")
            _note_hold(verdict, row, "eager", eager)
            row.eager_median_us = eager["cand"][0]
            row.mode, cand, ref = "eager", eager["cand"], eager["ref"]
            row.times_us, row.ref_times_us = eager["cand_times"], eager["ref_times"]
            if self.device == "cuda" and ref[0] < self.policy.graph_below_us and eager.get("raced") is None:
                with self._gpu("exclusive"):
                    graph = self._time_graph(row.shape, dtype)
                if graph is not None:
                    _note_hold(verdict, row, "graph", graph)
                    row.graph_median_us, row.ref_graph_median_us = graph["cand"][0], graph["ref"][0]
                    row.mode, cand, ref = "graph", graph["cand"], graph["ref"]
                    row.times_us, row.ref_times_us = graph["cand_times"], graph["ref_times"]
                else:
                    verdict.notes.append(f"shape {row.shape} {row.dtype}: not capturable in a CUDA graph")
            row.median_us, row.iqr_us, row.rse = cand
            row.ref_median_us, row.ref_iqr_us = ref[0], ref[1]
            row.reps = len(row.times_us)
            row.speedup = ref[0] / cand[0] if cand[0] > 0 else None
            raced = (graph if row.mode == "graph" else eager).get("raced")
            if raced is not None:  # the other shapes are not timed
                verdict.raced = True
                verdict.race = {"shape": row.shape, "dtype": row.dtype, "mode": row.mode, "batches": raced.batches,
                                "slower": round(raced.slower, 4), "threshold": round(raced.threshold, 4),
                                "p_value": raced.p_value, "best_seq": raced_seq(self.opts.race, row)}
                verdict.notes.append(f"raced: {raced.slower:.2f}x slower than the best at "
                                     f"{_shape_text(row.shape)} {row.dtype} after {raced.batches} batches; "
                                     "the other shapes were not timed")
                break
        self._roofline(timed, verdict, ceilings)

    def _timing_order(self, rows: list[ShapeResult]) -> list[ShapeResult]:
        """The race bar's shapes first (in its order), then the heaviest first: a loser is seen early."""
        bar = self.opts.race.order() if self.opts.race else []

        def rank(row: ShapeResult):
            key = (tuple(sorted(row.shape.items())), row.dtype)
            return (bar.index(key) if key in bar else len(bar), -self._size(row.shape, getattr(torch, row.dtype)))

        return sorted(rows, key=rank)

    def _roofline(self, rows: list[ShapeResult], verdict: Verdict, ceilings):
        """Each timed shape's floor, and ``beyond_roofline`` for a time under it. Measured ceilings may only
        make a verdict stricter once re-checked: when a time (the candidate's or the reference's) is under
        a floor from ceilings measured before this evaluation, they are measured again now and the shape is
        judged against the fresh numbers (the larger of each, both being achievable rates). The reference
        under a floor proves the ceilings wrong: the cached entry is dropped, and that shape's floor is not
        applied; the reference is never refused."""
        from ratchet.hardware.ceilings import refute, remeasure_ceilings

        costs = [(row, self.task.shape_cost(row.shape, getattr(torch, row.dtype))) for row in rows]
        costs = [(row, cost) for row, cost in costs if cost is not None and row.median_us]

        def under(us, row_cost, c) -> bool:
            return bool(us) and us * ROOFLINE_SLACK < c.floor_us(row_cost.bytes, row_cost.flops)

        suspect = any(under(r.median_us, c, ceilings) or under(r.ref_median_us, c, ceilings) for r, c in costs)
        if suspect and ceilings.measured_unix < self.started_unix:
            stale = ceilings
            if any(under(r.ref_median_us, c, stale) for r, c in costs):
                refute(stale)  # proven too low: never judged against again, whatever the fresh number
            with self._gpu("exclusive"), self._on_judged_gpu():
                ceilings = remeasure_ceilings(self.device, attempts=RECHECK_ATTEMPTS).best_with(stale)
            verdict.notes.append(f"ceilings re-measured before judging the roofline: copy {ceilings.copy_tbps:.3g} "
                                 f"TB/s, matmul {ceilings.matmul_tflops:.3g} TFLOP/s (those used were copy "
                                 f"{stale.copy_tbps:.3g}, matmul {stale.matmul_tflops:.3g})"
                                 + ("" if ceilings.trusted else f"; not trusted: {ceilings.busy}"))
        verdict.device_name = ceilings.device_name
        verdict.ceilings = {"copy_tbps": ceilings.copy_tbps, "matmul_tflops": ceilings.matmul_tflops}
        slack = ROOFLINE_SLACK if ceilings.trusted else UNTRUSTED_ROOFLINE_SLACK
        reasons = []
        for row, cost in costs:
            row.floor_us = ceilings.floor_us(cost.bytes, cost.flops)
            row.achieved_tbps = cost.bytes / (row.median_us * 1e-6) / 1e12
            row.achieved_tflops = cost.flops / (row.median_us * 1e-6) / 1e12 if cost.flops else 0.0
            row.roofline_fraction = row.floor_us / row.median_us
            label = f"shape {row.shape} {row.dtype}"
            if under(row.ref_median_us, cost, ceilings):
                verdict.notes.append(f"{label}: the reference's {row.ref_median_us:.2f} us is under the floor of "
                                     f"{row.floor_us:.2f} us even after a re-measurement: the floor is not applied "
                                     "to this shape (the ceilings or the task's cost model are wrong for it)")
            elif row.median_us * slack < row.floor_us:
                reasons.append(Reason("beyond_roofline",
                                      f"{label}: {row.median_us:.2f} us is under the floor of {row.floor_us:.2f} us "
                                      f"({row.achieved_tbps:.2f} TB/s against a measured {ceilings.copy_tbps:.2f} "
                                      f"TB/s{'' if ceilings.trusted else ', measured on a busy machine'})"))
        if reasons:
            raise Abort(reasons)

    def _time_graph(self, shape, dtype):
        key = f"{shape}-{dtype}"
        seeds = {}
        for name, worker in (("cand", self.cand), ("ref", self.ref)):
            seeds[name] = self.rng.getrandbits(62)
            reply, _ = worker.ask({"op": "capture", "shape": shape, "dtype": str(dtype).removeprefix("torch."),
                                   "seed": seeds[name], "graph_key": key},
                                  self._wall_limit(self.limits.call_s), run_s=self.limits.call_s)
            if not reply.get("captured"):
                return None
        # A graph replays the scalar arguments it was captured with (they are baked into its kernels),
        # while tensors are refilled in place: timed outputs are checked against those scalars.
        captured = self.make_inputs(shape, dtype, seeds["cand"])
        scalars = tuple(None if isinstance(x, torch.Tensor) else x for x in captured)
        return self._time_mode(shape, dtype, "graph", graph_key=key, scalars=scalars)

    def _time_mode(self, shape, dtype, mode: str, graph_key: str | None = None, scalars: tuple | None = None) -> dict:
        """Interleaved batches of reference and candidate calls until both medians are tight."""
        label = f"shape {shape} {str(dtype).removeprefix('torch.')} ({mode})"
        policy = self.policy
        sides = {"cand": self.cand, "ref": self.ref}
        extra = {"mode": mode, "graph_key": graph_key, "flush": True, "guards": self.opts.guards, "hold_scale": 1}
        warm_launches = []
        for name, worker in sides.items():  # warm-up: the same calls as timed ones, numbers discarded
            for _ in range(policy.warmup_calls):
                reply = self._call(worker, shape, dtype, self.rng.getrandbits(62), **extra)
                if name == "cand":
                    self._raise_on_flags(reply, label)
                elif reply.get("launch_us") is not None:
                    warm_launches.append(reply["launch_us"])
        # Start at the hold the reference's warm-up launches need: each restart below throws away a whole
        # measurement (on the H200, 2026-11-30, decode_attention's eager reference needed 4-8x on every
        # shape and the restarts made timing 107 of an evaluation's 150 s).
        extra["hold_scale"] = starting_hold_scale(warm_launches)
        race = self.opts.race.entry(shape, str(dtype).removeprefix("torch."), mode) if self.opts.race else None
        pending = []  # timed calls whose outputs are checked after timing, restarts included
        run = self._measure_held(shape, dtype, label, extra, pending, race)
        doubt = self._noisy_failure(shape, dtype, run, pending, label, scalars)
        if doubt is not None:
            # Two checks here reject honest kernels at a small rate: the outside clock (a worker that lost a
            # time slice) and a sampling task's distribution test (chance). Hidden work and a biased sampler
            # show again in a second measurement; noise seldom does twice. The second measurement's times
            # stand, so a candidate gains nothing from behaving differently in the first.
            pending = []
            run = self._measure_held(shape, dtype, label, extra, pending, race)
            again = self._noisy_failure(shape, dtype, run, pending, label, scalars)
            if again is not None:
                raise Abort([Reason(r.code, f"{r.detail} (and again on a second measurement)")
                             for r in again.reasons])
            self.confirmations.append(f"{doubt.reasons[0].detail}: not so on a second measurement, whose "
                                      "times stand")
        cand, ref = summarize(run["times"]["cand"]), summarize(run["times"]["ref"])
        return {"cand": cand, "ref": ref, "cand_times": run["times"]["cand"], "ref_times": run["times"]["ref"],
                "hold_scale": extra["hold_scale"], "exposed": run["exposed"], "raced": run["raced"]}

    def _measure_held(self, shape, dtype, label, extra: dict, pending: list, race) -> dict:
        """One measurement, started over with a doubled launch hold while the reference's launches
        outlast it (``extra["hold_scale"]`` keeps the hold reached)."""
        while True:
            run = self._measure(shape, dtype, label, extra, pending, race)
            self.call_costs.merge(run["host"])
            if run["raced"] is not None:  # beyond the bar: no restart with a longer hold either
                return run
            # Only the reference's launches decide: a busy host slows both sides' launches, while a slow
            # launch path of the candidate's own (host work before its kernels) is its cost and must stay
            # in its times; a longer hold would hide that host work from the events.
            if not too_many_exposed(run["exposed"]["ref"], len(run["times"]["ref"])) \
                    or extra["hold_scale"] >= MAX_HOLD_SCALE:
                return run
            # The reference's launches (host time from queueing the hold to queueing the end event)
            # outlasted the hold: the GPU may have sat idle inside the timed window, so those times include
            # the launch path (on the H200, 2026-11-30, a 16 us kernel read 37-70 us in a run whose other
            # evaluations compiled meanwhile). Both sides start over with a doubled hold.
            extra["hold_scale"] *= 2

    def _noisy_failure(self, shape, dtype, run: dict, pending: list, label, scalars) -> Abort | None:
        """The failure of a check that noise can fail (the distribution test over the timed calls, the
        clock check), returned to be confirmed; a wrong value is raised at once."""
        # The fetched outputs are checked after timing: computing references between timed calls
        # competed with the workers for the CPU and made the times noisier (docs/NOTES.md).
        details = self._verify_timed(shape, dtype, pending, label, scalars)
        if details:
            return Abort([Reason("timed_output_wrong", f"{label}: timed calls: {d}") for d in details])
        if self.opts.guards:
            try:
                self._clock_check(summarize(run["times"]["cand"])[0], run["overhead"], run["gaps"], label)
            except Abort as abort:
                return abort
        return None

    def _measure(self, shape, dtype, label, extra: dict, pending: list, race=None) -> dict:
        """Interleaved batches of both sides at one launch hold, until both medians are tight or time is up."""
        policy = self.policy
        sides = {"cand": self.cand, "ref": self.ref}
        times = {"cand": [], "ref": []}
        overhead = {"cand": [], "ref": []}
        gaps = {"cand": [], "ref": []}
        exposed = {"cand": 0, "ref": 0}
        host = CallCosts()
        started = time.perf_counter()
        batches = 0
        while True:
            order = ["cand", "ref"]
            self.rng.shuffle(order)
            for name in order:
                seeds = [self.rng.getrandbits(62) for _ in range(policy.batch)]
                for reply in self._call_timed(sides[name], shape, dtype, seeds, **extra):
                    times[name].append(reply["us"])
                    exposed[name] += launch_exposed(reply.get("launch_us"), extra["hold_scale"])
                    host.add(reply)
                    overhead[name].append(reply["wall_us"] - reply["us"])
                    if reply.get("gap_us") is not None:
                        gaps[name].append(reply["gap_us"])
                    if name == "cand":
                        self._raise_on_flags(reply, label)
                if name == "cand" and self.opts.guards:
                    # Which timed calls get checked is decided after the batch ran: the kernel cannot know.
                    for index, seed in enumerate(seeds):
                        if not pending or self.rng.random() < policy.verify_fraction:
                            pending.append(self._fetch_timed(seed, index))
            batches += 1
            n = len(times["cand"])
            cand, ref = summarize(times["cand"]), summarize(times["ref"])
            tight = cand[2] < policy.target_rse and ref[2] < policy.target_rse and n >= policy.min_reps
            spent = time.perf_counter() - started
            done = tight or spent > policy.cap_s * 2 or n >= policy.max_reps or time.perf_counter() > self.deadline
            raced = None
            # The race bar is asked at a few fixed looks and once at the end: few looks keep the chance
            # of racing an honest, no-slower candidate small (judge.race).
            if race is not None and (done or batches in self.opts.race.looks):
                raced = race_decision(race, self.opts.race, times["cand"], times["ref"], batches)
            if done or raced is not None:
                return {"times": times, "overhead": overhead, "gaps": gaps, "exposed": exposed, "host": host,
                        "raced": raced}

    def _fetch_timed(self, seed, index: int) -> tuple:
        """The outputs of call ``index`` of the timed batch that just returned (random elements of large
        ones)."""
        sampled = not isinstance(self.task.check, StatisticalRule) and not callable(self.task.check)
        sample = {"seed": self.rng.getrandbits(62), "count": SAMPLED_ELEMENTS} if sampled else None
        fetched, _ = self.cand.ask({"op": "fetch", "inputs": False, "sample": sample, "index": index},
                                   self.limits.call_s)
        self._raise_on_error(fetched)
        return seed, fetched, sample

    def _verify_timed(self, shape, dtype, pending: list, label, scalars=None) -> list[str]:
        """The fetched timed calls' outputs, each against the reference; a wrong value is raised. A
        sampling task's rule is applied once to all of them pooled, as to the correctness calls, and its
        failure details returned (to be confirmed): its distribution test rejects an honest sampler at its
        false-reject rate per application, so applied to each timed call (hundreds per shape on the H200)
        it made the evaluation's false-reject rate grow with the number of calls checked; the likely cause
        of two honest top-p seed configs failing timed_output_wrong there (2026-12-01)."""
        rule = self.task.check if isinstance(self.task.check, StatisticalRule) else None
        pairs = []
        try:
            for seed, fetched, sample in pending:
                pairs.append(self._verify(shape, dtype, seed, fetched, label, statistical=rule is not None,
                                          sample=sample, scalars=scalars))
        except Abort as abort:
            codes = {r.code for r in abort.reasons}
            if codes & {"wrong_output", "nan_inf", "unwritten_output", "statistical"}:
                raise Abort([Reason("timed_output_wrong", r.detail) for r in abort.reasons]) from None
            raise
        return rule.test(pairs) if rule and pairs else []

    def _clock_check(self, cand_median_us: float, overhead: dict, gaps: dict, label: str):
        """Time the kernel's own timer did not see: device work after its end event (CUDA), and the
        outside wall clock per call, each against the reference's in the same session."""
        if gaps["cand"] and gaps["ref"]:
            # Lower quartiles: the gap ends when the host records the last event after its synchronize,
            # so host wake-up noise (spikes of 50-100 us on the H200 host) adds to it; hidden device
            # work adds to every call.
            hidden = _quartile(gaps["cand"]) - _quartile(gaps["ref"])
            slack = GAP_SLACK_US + 0.25 * cand_median_us
            if hidden > slack:
                raise Abort([Reason("clock_mismatch",
                                    f"{label}: the device worked {hidden:.0f} us per call after the kernel's end "
                                    f"event (more than the reference, allowed {slack:.0f} us): work on another stream?")])
        if self.device == "cuda":
            # On CUDA the events bound hidden host work by construction: host work inside the call beyond
            # the launch hold leaves the GPU idle between the events, and work after the return shows in
            # the gap above, the census and the deferred-write comparison. The outside clock adds only
            # noise there: hundreds of microseconds between two workers on the H200 host, which falsely
            # rejected honest kernels (docs/NOTES.md, 2026-11-30).
            return
        # Lower quartiles: host noise comes in spikes, hidden work in every call. On a machine whose cores
        # other processes keep busy, the workers lose whole time slices (milliseconds) at random, which
        # moves even the lower quartiles of two workers apart by more than 1 ms (2026-12-01: 1362 us for an
        # honest rmsnorm seed): the slack grows with the spread both workers' overheads show, while hidden
        # work adds to every call and shifts the candidate's quartiles without widening them.
        hidden = _quartile(overhead["cand"]) - _quartile(overhead["ref"])
        spread = _iqr(overhead["cand"]) + _iqr(overhead["ref"])
        slack = max(2 * cand_median_us, CLOCK_SLACK_US[self.device], CLOCK_SPREAD_FACTOR * spread)
        if hidden > slack and _cores_taken():
            slack = max(slack, BUSY_CLOCK_SLACK_US)
        if hidden > slack:
            raise Abort([Reason("clock_mismatch",
                                f"{label}: {hidden:.0f} us per call seen by the outside clock beyond the "
                                f"kernel's timed {cand_median_us:.1f} us (allowed {slack:.0f} us; the "
                                f"overheads' IQRs add to {spread:.0f} us)")])


def interpreted_limits(limits: Limits) -> Limits:
    """``limits`` for a candidate run by Triton's interpreter: the first call's and each later call's
    running time scaled by INTERPRETER_LIMIT_FACTOR."""
    f = INTERPRETER_LIMIT_FACTOR
    return replace(limits, first_call_s=limits.first_call_s * f, call_floor_s=limits.call_floor_s * f,
                   call_s=limits.call_s * f, total_s=max(limits.total_s, limits.call_s * f * 4))


def _uses_triton(candidate: Candidate) -> bool:
    """The candidate imports Triton (a word in a comment does not count)."""
    return re.search(r"^\s*(?:import|from)\s+triton\b", candidate.source or "", re.MULTILINE) is not None


def _cores_taken() -> bool:
    """Every core busy on average over the last minute (the load average counts runnable processes)."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:  # no load average on this OS
        return False


def _note_hold(verdict: Verdict, row: ShapeResult, mode: str, timed: dict):
    """Say when a shape was timed with a longer launch hold, or launches still outlasted the hold."""
    label = f"shape {row.shape} {row.dtype} ({mode})"
    if timed.get("hold_scale", 1) > 1:
        verdict.notes.append(f"{label}: timed with a {timed['hold_scale']}x launch hold (the reference's launches "
                             "outlasted the shorter ones: a busy host)")
    exposed, calls = timed.get("exposed") or {}, len(timed.get("cand_times") or ())
    if any(too_many_exposed(exposed.get(side, 0), calls) for side in ("cand", "ref")):
        verdict.notes.append(f"{label}: launches outlasted the hold in {exposed.get('cand', 0)} candidate and "
                             f"{exposed.get('ref', 0)} reference calls (their host launch time is in their times)")


def _quartile(xs: list[float]) -> float:
    import numpy as np

    return float(np.percentile(xs, 25)) if xs else 0.0


def _iqr(xs: list[float]) -> float:
    import numpy as np

    return float(np.percentile(xs, 75) - np.percentile(xs, 25)) if xs else 0.0


def weighted_geomean_speedup(rows: list[ShapeResult]) -> float | None:
    timed = [r for r in rows if r.speedup and not r.held_out]
    if not timed:
        return None
    total = sum(r.weight for r in timed)
    return math.exp(sum(r.weight * math.log(r.speedup) for r in timed) / total)


def shape_size(task: Task, shape: dict, dtype) -> float:
    """How heavy a shape is: the bytes and FLOPs of the task's cost model, else its element count."""
    cost = task.shape_cost(shape, getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    if cost is not None:
        return float(cost.bytes) + float(cost.flops)
    return float(math.prod(shape.values()))


def raced_seq(bar: RaceBar | None, row: ShapeResult):
    entry = bar.entry(row.shape, row.dtype, row.mode) if bar else None
    return entry.best_seq if entry else None


def _shape_text(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items())
