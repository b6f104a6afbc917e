"""Landscape mode: every valid config of a seed's SPACE, measured cheaply but honestly, in one process.

Why in-process and not ``ratchet.judge.evaluate`` per config: a full evaluation pays a fresh worker
(CUDA context, Triton load: ~2.3 s on the H200), a profiled call (CUPTI), poisoned and fetched
correctness calls and held-out shapes, ~21 judge-seconds per config for 4 decode shapes; a search
benchmark over a few hundred configs would not fit a 30-minute GPU session. Here the judge's own
timed-call code is reused as it is: two ``ratchet.judge.worker.Harness`` objects (candidate and
reference) live in this process and their ``call``/``capture`` do the L2 flush, the launch hold,
CUDA events or ``perf_counter_ns``, and CUDA-graph replay exactly as in the worker; the interleaved
loop below follows ``Evaluation._time_mode`` with the same ``TimingPolicy`` and ``summarize`` (warm-up,
alternating batches in random order, stop at the policy's RSE or cap; graph mode where the reference
is under ``graph_below_us``). Outputs are checked once per shape (the rule's own call count for
statistical tasks) with the task's own rule (``check_values`` / ``StatisticalRule.test``) against the
float64 reference. The speedup is ``weighted_geomean_speedup`` over the shapes, as the judge computes it.

What is left out, so a landscape is NOT a verdict: guards (poison, census, profiler, clock checks),
held-out shapes, the other dtypes, and process isolation (the seeds are the project's own code).
On the CPU the process runs torch on one thread, as each of the judge's CPU workers does.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
from benchmarks.common import subset_task

from ratchet.candidate import Candidate
from ratchet.judge.check import as_tuple, check_values
from ratchet.judge.evaluation import weighted_geomean_speedup
from ratchet.judge.timing import CPU_POLICY, GPU_POLICY, LAUNCH_HOLD_US, TimingPolicy, cycles_for_us, summarize
from ratchet.judge.verdict import ShapeResult
from ratchet.judge.worker import Harness, classify_exception
from ratchet.task import StatisticalRule, Task


@dataclass(frozen=True)
class LandscapeOptions:
    device: str = "cpu"
    shapes: int = 4  # the first N public shapes of the device's shape set
    policy: TimingPolicy | None = None  # the judge's policy for the device when None
    rng_seed: int = 0


class _Failed(Exception):
    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def restricted_task(task: Task, device: str, shapes: int) -> Task:
    """``subset_task`` (first dtype, first ``shapes`` public shapes of ``device``) without held-out shapes:
    a landscape times the public shapes only."""
    sub = subset_task(task, device, shapes, first_dtype=True)
    field = "cpu" if device == "cpu" else "gpu"
    return dataclasses.replace(sub, **{field: dataclasses.replace(sub.shape_set(device), held_out=None)})


def estimate_s(n_configs: int, n_shapes: int, policy: TimingPolicy, graphs: bool) -> float:
    """Upper bound on timing seconds: each shape and mode stops at twice the policy's cap at the latest."""
    return n_configs * n_shapes * 2 * policy.cap_s * (2 if graphs else 1)


class Landscape:
    """Times every config of one seed against the task's reference, in this process."""

    def __init__(self, task: Task, candidate: Candidate, options: LandscapeOptions):
        self.task, self.cand, self.opts = task, candidate, options
        self.device = options.device
        self.policy = options.policy or (GPU_POLICY if self.device == "cuda" else CPU_POLICY)
        self.rng = random.Random(options.rng_seed)
        self.shapes = [dict(s) for s in task.shape_set(self.device).public][:options.shapes]
        self.dtype = tuple(task.dtypes)[0]
        if self.device == "cpu":
            torch.set_num_threads(1)  # as the judge's CPU workers (OMP_NUM_THREADS=1)
        load = {"op": "load", "task": task.source_path or task.name, "device": self.device}
        if self.device == "cuda":
            load["hold_cycles"] = cycles_for_us(LAUNCH_HOLD_US)  # one number for both sides, as the judge
        self.ref = Harness()
        self.ref.load(dict(load, candidate=None))
        self.side = Harness()
        reply = self.side.load(dict(load, candidate=candidate.path, kind=candidate.kind, config={}))
        if "error" in reply:
            raise _Failed(reply["error"], reply["detail"])

    def measure(self, config: dict) -> dict:
        """One row: verdict, speedup (weighted geomean over the shapes), per-shape times, seconds taken."""
        t0 = time.perf_counter()
        self.side.config = self.cand.resolve_config(config)
        rows, shapes, verdict, reason = [], [], "pass", None
        try:
            for i, shape in enumerate(self.shapes):
                self._check(shape, first=i == 0)
                row = ShapeResult(shape=shape, dtype=str(self.dtype).removeprefix("torch."),
                                  weight=self.task.shape_weight(shape))
                mode, cand_us, ref_us = self._time(shape)
                row.speedup = ref_us / cand_us if cand_us > 0 else None
                rows.append(row)
                shapes.append({"shape": shape, "mode": mode, "cand_us": round(cand_us, 3), "ref_us": round(ref_us, 3),
                               "weight": row.weight})
        except _Failed as failed:
            verdict, reason = ("error" if failed.code in _ERRORS else "fail"), f"{failed.code}: {failed.detail}"
            if self.device == "cuda":
                torch.cuda.synchronize()  # a poisoned context raises here: nothing after it could be trusted
        speedup = weighted_geomean_speedup(rows) if verdict == "pass" else None
        return {"config": dict(config), "verdict": verdict, "speedup": speedup, "reason": reason,
                "shapes": shapes, "landscape_s": round(time.perf_counter() - t0, 6)}  # a fast failure is under 1 ms

    # -- correctness: once per shape, with the task's own rule --------------------------------------
    def _check(self, shape: dict, first: bool):
        rule = self.task.check if isinstance(self.task.check, StatisticalRule) else None
        calls = max(1, min(rule.max_calls, math.ceil(rule.min_draws / max(1, rule.draws(shape))))) if rule else 1
        label = f"shape {shape} {str(self.dtype).removeprefix('torch.')}"
        pairs = []
        for _ in range(calls):
            seed = self.rng.getrandbits(62)
            self._call(self.side, shape, seed, first=first, flush=False)
            outs = tuple(o.detach().clone() if isinstance(o, torch.Tensor) else o for o in self.side.last_outputs)
            generator = torch.Generator(device=self.device).manual_seed(seed)
            inputs = self.task.make_inputs(shape, self.dtype, self.device, generator)
            native = as_tuple(self.task.reference(*inputs))  # the expected structure, at the task's dtype
            if len(outs) != len(native) or any(
                    not isinstance(o, torch.Tensor) or o.shape != n.shape or o.dtype != n.dtype
                    for o, n in zip(outs, native)):
                raise _Failed("wrong_shape", f"{label}: outputs do not match the reference's shapes and dtypes")
            if rule:
                pairs.append((tuple(x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs),
                              tuple(o.cpu() for o in outs)))
                continue
            upcast = tuple(x.to(self.task.reference_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point()
                           else x for x in inputs)
            refs = as_tuple(self.task.reference(*upcast))
            reasons = check_values(self.task, inputs, outs, refs, self.dtype, label)
            if reasons:
                raise _Failed(reasons[0].code, reasons[0].detail)
        if rule:
            details = rule.test(pairs)
            if details:
                raise _Failed("statistical", f"{label}: {details[0]}")

    def _call(self, harness: Harness, shape: dict, seed: int, first: bool = False, **extra) -> dict:
        msg = {"shape": shape, "dtype": str(self.dtype).removeprefix("torch."), "seed": seed,
               "rng_seed": self.rng.getrandbits(62), "guards": False, **extra}
        try:
            return harness.call(msg)
        except Exception as exc:  # the seed's own failure (compile error, out of resources): a row, not a crash
            raise _Failed(*classify_exception(exc, first)) from None

    # -- timing: the judge's interleaved protocol ---------------------------------------------------
    def _time(self, shape: dict) -> tuple[str, float, float]:
        cand, ref = self._time_mode(shape, {"mode": "eager"})
        mode = "eager"
        if self.device == "cuda" and ref < self.policy.graph_below_us:
            key = f"{shape}"
            seed = self.rng.getrandbits(62)
            if all(h.capture({"shape": shape, "dtype": str(self.dtype).removeprefix("torch."), "seed": seed,
                              "graph_key": key}).get("captured") for h in (self.side, self.ref)):
                cand, ref = self._time_mode(shape, {"mode": "graph", "graph_key": key})
                mode = "graph"
        return mode, cand, ref

    def _time_mode(self, shape: dict, extra: dict) -> tuple[float, float]:
        policy = self.policy
        sides = {"cand": self.side, "ref": self.ref}
        times = {"cand": [], "ref": []}
        for harness in sides.values():  # warm-up, numbers discarded
            for _ in range(policy.warmup_calls):
                self._call(harness, shape, self.rng.getrandbits(62), flush=True, **extra)
        started = time.perf_counter()
        while True:
            order = list(sides)
            self.rng.shuffle(order)
            for name in order:
                for _ in range(policy.batch):
                    times[name].append(self._call(sides[name], shape, self.rng.getrandbits(62), flush=True,
                                                  **extra)["us"])
            cand, ref = summarize(times["cand"]), summarize(times["ref"])
            tight = cand[2] < policy.target_rse and ref[2] < policy.target_rse and len(times["cand"]) >= policy.min_reps
            if tight or time.perf_counter() - started > policy.cap_s * 2 or len(times["cand"]) >= policy.max_reps:
                return cand[0], ref[0]


_ERRORS = {"import_error", "missing_kernel", "bad_signature", "compile_error", "kernel_exception", "out_of_memory"}


def measure_landscape(task: Task, candidate: Candidate, options: LandscapeOptions,
                      on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per valid config, in SPACE order; ``on_row`` sees each as soon as it is measured."""
    land = Landscape(task, candidate, options)
    rows = []
    for config in candidate.valid_configs():
        rows.append(land.measure(config))
        if on_row:
            on_row(rows[-1])
    return rows


def pooled_reference(table: dict, weight: Callable[[dict], float] = lambda shape: 1.0) -> dict:
    """The table with every passing row's speedup taken against one reference time per shape and mode:
    the median of that shape's reference times over all rows.

    Each row timed the reference again beside its own config, so a row's speedup carries the reference's
    noise too; ranking configs is about the candidate's times. On the H200 (2026-11-30) decode_attention's
    reference at B=1, L=4096 read 55 to 276 us across the 12 rows of one landscape while the candidate read
    16 to 24 us, which reordered the configs. A shape's weight is the one stored with it, else ``weight``.
    """
    refs: dict[tuple, list[float]] = {}
    for row in table["rows"]:
        for s in row.get("shapes") or []:
            refs.setdefault((_key(s["shape"]), s["mode"]), []).append(s["ref_us"])
    if not refs:
        return table
    pooled = {key: statistics.median(times) for key, times in refs.items()}
    rows = []
    for row in table["rows"]:
        if row["verdict"] != "pass" or not row.get("shapes"):
            rows.append(row)
            continue
        results = [ShapeResult(shape=s["shape"], dtype="", weight=s.get("weight", weight(s["shape"])),
                               speedup=pooled[(_key(s["shape"]), s["mode"])] / s["cand_us"])
                   for s in row["shapes"]]
        rows.append(dict(row, speedup=weighted_geomean_speedup(results), own_reference_speedup=row["speedup"]))
    return dict(table, rows=rows, reference="pooled: each shape's median reference time over all rows")


def _key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


# -- synthetic landscapes (NOT measurements) ---------------------------------------------------------
SYNTHETIC_SPACE = {"BLOCK": [1024, 256, 512, 2048, 4096, 8192, 16384], "num_warps": [4, 1, 2, 8, 16],
                   "num_stages": [2, 1, 3, 4]}
SYNTHETIC_CONSTRAINTS = ["BLOCK >= 32 * num_warps"]


def synthetic_table(seed: int) -> dict:
    """A made-up but roofline-shaped landscape of a streaming kernel over N elements, H200-like numbers.

    Time = bytes / achieved bandwidth, where bandwidth follows Little's law from the bytes in flight
    (resident programs x BLOCK x stages, capped by threads and registers per SM), times the last-wave
    tail, times a spill penalty when elements per thread x stages exceed the registers; plus launch and
    per-program costs, 1% multiplicative noise and a per-landscape quirk per warp count. Its only use is
    to compare searchers on spaces larger than the seeds' own; it says nothing about a real GPU.
    """
    rng = random.Random(seed)
    n = 2 ** rng.uniform(14, 26)  # elements
    latency_s = rng.uniform(0.5e-6, 1.0e-6)
    quirk = {w: math.exp(rng.gauss(0, 0.03)) for w in SYNTHETIC_SPACE["num_warps"]}
    sms, peak_bps = 132, 4.8e12

    def seconds(block, warps, stages):
        per_thread = block / (32 * warps)
        regs = 24 + 2 * per_thread * stages
        spill = 1 + max(0.0, regs - 255) / 64
        resident = max(1, min(2048 // (32 * warps), 65536 // (min(regs, 255) * 32 * warps), 32))
        programs = math.ceil(n / block)
        in_flight = min(programs, sms * resident) * block * 4 * min(stages, 3) / 2
        bandwidth = min(peak_bps, in_flight / latency_s)
        waves = programs / (sms * resident)
        tail = waves / math.ceil(waves)
        return (8 * n / bandwidth / tail * spill * quirk[warps] + 3e-6 + 2e-8 * waves) * math.exp(rng.gauss(0, 0.01))

    ref = 1.3 * seconds(1024, 4, 1)
    keys = list(SYNTHETIC_SPACE)
    rows = []
    for combo in itertools.product(*SYNTHETIC_SPACE.values()):
        config = dict(zip(keys, combo))
        if config["BLOCK"] >= 32 * config["num_warps"]:
            rows.append({"config": config, "verdict": "pass", "speedup": ref / seconds(*combo), "landscape_s": 1.0})
    return {"task": f"synthetic-roofline-{seed}", "seed_file": None, "space": SYNTHETIC_SPACE,
            "constraints": SYNTHETIC_CONSTRAINTS, "device": "synthetic (a model, not a measurement)",
            "date": None, "mode": "synthetic", "rows": rows}
