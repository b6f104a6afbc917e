"""Timing whole workload steps (decode steps, prefills), several settings of one workload interleaved.

Shared by ``ratchet gate`` (baseline against with-kernel, per setting) and ``ratchet stack`` (one entry
per layer of the waterfall). The protocol is the judge's (docs/design.md, "Timing protocol") applied to a
whole model step instead of one op:

- Everything compared is measured in the same session, in alternating batches: each round runs one
  batch of every entry in a fresh random order, so drift (clocks, thermals, a neighbour on the host)
  lands on all entries alike. Never against a number stored from another day.
- A batch is ``k`` consecutive steps between two clock reads, and its time over ``k`` is one sample;
  ``k``, the same for every entry, is chosen from warm-up so a batch of the fastest entry lasts about
  ``batch_us``. Before each batch the entry's ``prepare`` runs outside the clock (the KV cache's lengths
  and the tokens reset, the registry set to the entry's kernels), so every batch decodes at the same
  context.
- CPU: one intra-op thread while timing. The CPU workloads are tiny, so threads buy nothing, and with
  two threads a step waits at every parallel op for a thread the OS has parked when another process
  holds a core: on two cores with one busy, 0.25 ms steps of tiny llama took 45 ms (2026-11-30).
- GPU: CUDA events around the batch, a device-wide synchronize before and after; no L2 flush (a model
  step's weights and KV cache are far larger than the L2, and consecutive steps run back to back in
  production, exactly as here). CPU: ``perf_counter_ns``; CPU numbers say nothing about GPUs.
- Rounds continue until the relative standard error of every entry's median is below ``target_rse``
  (after ``min_batches``), or ``max_batches`` or the time cap. Medians, IQRs and RSEs come from
  ``ratchet.judge.timing.summarize``.

"Slower beyond noise" (``compare``) is the keep rule's test turned around (``ratchet.run.keep``): a
candidate is slower only when its median is above the baseline's by more than the noise floor AND a
one-sided Mann-Whitney U test on the batch samples says so at ``alpha``. The noise floor is the
baseline's relative half-IQR (the spread one more measurement of the same thing shows,
``keep.noise_floor``), never less than ``min_noise``: 1% on a GPU (the run-to-run agreement of the
judge on a quiet H200), 8% on a CPU: two interleaved copies of the same kernel in tiny llama came out
up to 4% apart on two cores while another process held one, and the reference gated against its own
code read 0.99-1.04 (median 1.011) over 21 settings, so at 5% an honest kernel failed one CI run in about
four (2026-11-30). A median that is higher but within the floor is not "slower", and neither is a
significant 0.5% on a 1% floor.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from scipy.stats import mannwhitneyu

from ratchet.judge import timing as judge_timing
from ratchet.judge.timing import summarize
from ratchet.run.keep import KeepPolicy, noise_floor
from ratchet.e2e.workloads import DecodeStep, OpRegistry
from ratchet.e2e.workloads.runner import fill_random, random_tokens


@dataclass(frozen=True)
class StepTimingPolicy:
    min_batches: int = 10  # per entry, before the stopping rule may stop
    max_batches: int = 100
    cap_s: float = 1.0  # wall seconds per entry (a comparison of two entries may take twice this)
    target_rse: float = 0.01  # relative standard error of each median at which rounds stop
    batch_us: float = 2000.0  # aim for batches of about this long
    max_steps: int = 32  # steps per batch at most: a decode cache needs this much room past its context
    warmup: int = 2  # untimed calls of each entry before the first batch
    min_noise: float = 0.05  # floor of the noise threshold (relative)
    alpha: float = 0.01  # one-sided significance for "slower"
    cpu_threads: int | None = 1  # torch intra-op threads while timing on a CPU (None: leave as is)


GPU_STEP_POLICY = StepTimingPolicy(min_batches=10, max_batches=200, cap_s=4.0, target_rse=0.005, batch_us=5000.0,
                                   warmup=3, min_noise=KeepPolicy().min_noise)
CPU_STEP_POLICY = StepTimingPolicy(min_noise=0.08)  # see the module's docstring


def policy_for(device: str) -> StepTimingPolicy:
    return GPU_STEP_POLICY if device == "cuda" else CPU_STEP_POLICY


@dataclass
class Entry:
    """One thing to time: ``run()`` is one step; ``prepare()`` runs before each batch, off the clock."""

    name: str
    run: Callable[[], Any]
    prepare: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Timing:
    name: str
    median_us: float  # per step
    iqr_us: float
    rse: float
    batches: int
    steps_per_batch: int
    times_us: tuple[float, ...] = field(repr=False, default=())  # per-step time of each batch

    def to_json(self, with_times: bool = False) -> dict:
        out = {"median_us": self.median_us, "iqr_us": self.iqr_us, "rse": self.rse, "batches": self.batches,
               "steps_per_batch": self.steps_per_batch}
        if with_times:
            out["times_us"] = list(self.times_us)
        return out


@dataclass(frozen=True)
class Comparison:
    """A candidate's timing against a baseline's."""

    ratio: float  # candidate median / baseline median (> 1: slower)
    noise: float  # the relative noise floor used
    p_slower: float | None  # one-sided p-value that the candidate is slower
    slower: bool  # slower beyond noise, and significantly
    faster: bool  # faster beyond noise, and significantly

    def to_json(self) -> dict:
        return {"ratio": self.ratio, "noise": self.noise, "p_slower": self.p_slower, "slower": self.slower,
                "faster": self.faster}


class _Clock:
    """The judge's clock references, saved when ``ratchet.judge.timing`` was imported (before any kernel
    file was): a kernel that patches ``time.perf_counter_ns`` or ``torch.cuda.Event`` does not move them."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def start(self):
        if self.cuda:
            judge_timing.synchronize()
            event = judge_timing.Event(enable_timing=True)
            event.record()
            return event
        return judge_timing.perf_counter_ns()

    def stop_us(self, start) -> float:
        if self.cuda:
            end = judge_timing.Event(enable_timing=True)
            end.record()
            judge_timing.synchronize()  # device-wide: work left on any stream is inside the batch
            return start.elapsed_time(end) * 1000.0
        return (judge_timing.perf_counter_ns() - start) / 1000.0


def time_interleaved(entries: Sequence[Entry], device: str, policy: StepTimingPolicy = CPU_STEP_POLICY,
                     seed: int = 0) -> list[Timing]:
    """Time every entry in alternating batches (see the module's docstring); one Timing per entry."""
    threads = torch.get_num_threads()
    if device == "cpu" and policy.cpu_threads:
        torch.set_num_threads(policy.cpu_threads)
    try:
        return _time_interleaved(entries, device, policy, seed)
    finally:
        torch.set_num_threads(threads)


def _time_interleaved(entries: Sequence[Entry], device: str, policy: StepTimingPolicy, seed: int) -> list[Timing]:
    clock = _Clock(device)
    estimates = []
    for entry in entries:  # warm-up, then three timed calls to size the batches
        entry.prepare()
        for _ in range(policy.warmup):
            entry.run()
        one = []
        for _ in range(3):
            entry.prepare()
            t0 = clock.start()
            entry.run()
            one.append(clock.stop_us(t0))
        estimates.append(max(sorted(one)[1], 1.0))
    # One k for every entry: the first step after a reset costs a little more, and with different k that
    # extra would be spread over different counts of steps (measured: a 2-4% bias between identical
    # kernels on the CPU). k is sized on the fastest entry, so its batches last about batch_us.
    k = max(1, min(policy.max_steps, round(policy.batch_us / min(estimates))))
    steps = [k] * len(entries)
    samples: list[list[float]] = [[] for _ in entries]
    rng = random.Random(seed)
    order = list(range(len(entries)))
    deadline = time.monotonic() + policy.cap_s * len(entries)
    while True:
        rng.shuffle(order)
        for i in order:
            entry, k = entries[i], steps[i]
            entry.prepare()
            t0 = clock.start()
            for _ in range(k):
                entry.run()
            samples[i].append(clock.stop_us(t0) / k)
        n = len(samples[0])
        if n >= policy.max_batches:
            break
        if n >= policy.min_batches:
            if time.monotonic() > deadline or all(summarize(s)[2] <= policy.target_rse for s in samples):
                break
    out = []
    for entry, k, times in zip(entries, steps, samples):
        median, iqr, rse = summarize(times)
        out.append(Timing(entry.name, median, iqr, rse, len(times), k, tuple(times)))
    return out


def compare(baseline: Timing, candidate: Timing, policy: StepTimingPolicy = CPU_STEP_POLICY) -> Comparison:
    """Is ``candidate`` slower (or faster) than ``baseline`` beyond noise? (see the module's docstring)"""
    base = np.asarray(baseline.times_us, dtype=float)
    cand = np.asarray(candidate.times_us, dtype=float)
    ratio = candidate.median_us / baseline.median_us
    noise = noise_floor(base, KeepPolicy(min_noise=policy.min_noise))
    p_slower = p_faster = None
    if len(base) >= 3 and len(cand) >= 3:
        p_slower = float(mannwhitneyu(cand, base, alternative="greater").pvalue)
        p_faster = float(mannwhitneyu(cand, base, alternative="less").pvalue)
    slower = ratio > 1 + noise and p_slower is not None and p_slower < policy.alpha
    faster = ratio < 1 - noise and p_faster is not None and p_faster < policy.alpha
    return Comparison(ratio, noise, p_slower, slower, faster)


def tokens_per_s(batch: int, step_us: float) -> float:
    """Decode throughput: every step makes one token for each of ``batch`` rows."""
    return batch * 1e6 / step_us if step_us > 0 else math.nan


# -- what the entries run ------------------------------------------------------------------------------

def apply_impls(registry: OpRegistry, impls: Mapping[str, Callable[..., Any]]) -> None:
    """Make exactly ``impls`` run their ops; every other op runs its reference. Each op is set explicitly
    (the reference too) so a compiled step never has to trace the registry's fallback lookup."""
    for op in registry.ops:
        registry.set(op, impls.get(op) or registry.reference_of(op))


class DecodeBench:
    """A static KV cache filled at random to ``context`` positions and a tokens buffer: the state one
    decode step reads. ``reset()`` puts the cache's lengths and the tokens back, so each batch (and each
    logits check) starts from the same state; a step writes its own position before reading it, so what
    an earlier batch left past ``context`` is never read. The cache has ``slack`` positions past the
    context for the steps of one batch (and a graph capture's warm-up)."""

    def __init__(self, model, batch: int, context: int, *, slack: int, seed: int = 0,
                 top_p: float | None = None) -> None:
        self.model, self.batch, self.context = model, batch, context
        self.cache = model.new_cache(batch, context + slack)
        fill_random(model, self.cache, context, seed)
        self.start_tokens = random_tokens(model, batch, 1, seed + 1)[:, 0].contiguous()
        self.tokens = self.start_tokens.clone()
        self.top_p = None if top_p is None else torch.full((batch,), float(top_p), device=model.device)

    def reset(self) -> None:
        self.cache.seq_lens.fill_(self.context)
        self.tokens.copy_(self.start_tokens)

    def runner(self, *, cuda_graph: bool, forward: Callable | None = None) -> DecodeStep:
        """A DecodeStep on this state (captured now when ``cuda_graph``: set the registry first), running
        ``forward(tokens, cache)`` instead of the model's own decode step when given (a compiled one)."""
        self.reset()
        model = self.model if forward is None else _ForwardModel(self.model, forward)
        step = DecodeStep(model, self.cache, self.tokens, cuda_graph=cuda_graph, top_p=self.top_p)
        self.reset()
        return step


class _ForwardModel:
    """The model as a DecodeStep sees it, with ``decode_step`` replaced (e.g. by a torch.compile'd one)."""

    def __init__(self, model, forward: Callable) -> None:
        self._model, self.decode_step = model, forward

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
