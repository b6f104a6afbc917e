"""The one timing protocol (docs/design.md, "Timing protocol"). TRUSTED: proposers never edit this file.

GPU: CUDA events around the call, an L2 flush (a buffer twice the L2, written, then a second one read,
so the L2 holds clean lines) and a persisting-L2 reset before every timed call, a device-wide synchronize
after it, inputs refilled in place with fresh data before every call, adaptive repetitions until the
relative standard error of the median is small or a time cap is hit. Microsecond kernels are also timed
under CUDA-graph replay.
CPU: ``perf_counter_ns`` around the call; CPU numbers say nothing about GPUs.
"""

from __future__ import annotations

import ctypes
import math
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingPolicy:
    target_rse: float = 0.01  # relative standard error of the median at which timing stops
    batch: int = 8  # calls per batch; batches of the candidate and the reference alternate
    min_reps: int = 16
    max_reps: int = 2000
    cap_s: float = 2.0  # wall time per shape and side before timing stops regardless
    warmup_calls: int = 3
    graph_below_us: float = 50.0  # also time under CUDA graphs when the reference is this fast
    verify_fraction: float = 0.125  # share of timed calls whose outputs the judge checks in full


# On the H200, 1% and 16 calls left two runs of the same evaluation 2.9% apart at 39 us (2026-11-30);
# timing is a fifth of an evaluation's wall time there, so halving the error costs little.
GPU_POLICY = TimingPolicy(target_rse=0.005, min_reps=32)
# CPU times say nothing about GPUs; they serve runs that try the pipeline. On two cores a geglu evaluation
# spent 21 of its 27 s timing at 0.3 s a shape and side, half of it checking timed outputs (2026-12-02).
CPU_POLICY = TimingPolicy(cap_s=0.15, max_reps=200, min_reps=8, target_rse=0.02)


def summarize(times_us: list[float]) -> tuple[float, float, float]:
    """Median, interquartile range and the relative standard error of the median.

    The standard error of a median is about 1.2533 * sigma / sqrt(n); sigma is estimated robustly from
    the IQR (IQR / 1.349 for a normal distribution) so one slow outlier does not stall the stopping rule.
    """
    if not times_us:
        return math.nan, math.nan, math.inf
    xs = sorted(times_us)
    n = len(xs)
    median = _quantile(xs, 0.5)
    iqr = _quantile(xs, 0.75) - _quantile(xs, 0.25)
    if n < 3 or median <= 0:
        return median, iqr, math.inf
    rse = 1.2533 * (iqr / 1.349) / math.sqrt(n) / median
    return median, iqr, rse


def _quantile(xs: list[float], q: float) -> float:
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class L2Flusher:
    """Evicts the L2 before each timed call by writing a buffer twice its size, and resets lines a
    kernel may have marked persisting (cudaCtxResetPersistingL2Cache), so no call starts warm.

    Then it reads a second buffer of the same size. The write leaves the L2 full of dirty lines, and the
    timed call paid for writing them back to DRAM: on the H200 (2026-11-30, benchmarks/probes/flush_cost.py)
    4.7 us of a 268 MB rmsnorm's 69.6 (7%), a copy of the same bytes reaching 4.03 TB/s against 4.23 once
    the lines were clean. After the read the L2 holds clean lines that leave for free, and the call's
    inputs are still not in it.
    """

    def __init__(self, device: torch.device):
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
        self.buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        # Read as rows reduced into a small preallocated result: no allocation per call.
        self.clean = torch.ones(1024, 2 * l2 // 4 // 1024, dtype=torch.int32, device=device)
        self._sink = torch.empty(1024, dtype=torch.int32, device=device)
        self._reset = _cudart_function("cudaCtxResetPersistingL2Cache")

    def __call__(self):
        if self._reset is not None:
            self._reset()
        self.buffer.fill_(0x5A5A5A5A)
        torch.amax(self.clean, dim=1, out=self._sink)


def _cudart_function(name: str):
    """A function from the CUDA runtime that torch loaded, or None where it cannot be found."""
    for lib in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return getattr(ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL), name)
        except (OSError, AttributeError):
            continue
    try:
        import nvidia.cuda_runtime  # the pip wheel torch depends on

        from pathlib import Path

        for path in Path(list(nvidia.cuda_runtime.__path__)[0]).glob("lib/libcudart.so*"):
            return getattr(ctypes.CDLL(str(path)), name)
    except (ImportError, OSError, AttributeError):
        pass
    return None


# Saved at import, before any candidate code runs in this process: the harness only ever calls these
# references, so a candidate that replaces the module attributes cannot change the judge's clock.
perf_counter_ns = time.perf_counter_ns
Event = torch.cuda.Event
synchronize = torch.cuda.synchronize


# Microseconds of GPU work queued ahead of each timed call (torch.cuda._sleep) so that the CPU's
# launch of the kernel, Python and Triton launcher included, is over before the GPU reaches the start
# event: eager times are then the kernel's own, not its launch path (measured ~100 us on the H200 host).
LAUNCH_HOLD_US = 300.0
_CYCLES_PER_US: float | None = None
# A busy host (other evaluations compiling, a loaded machine) can make a launch outlast the hold; when the
# reference's launches do, the judge times the shape again with the hold doubled, up to this many times
# LAUNCH_HOLD_US (the candidate's own slow launches never raise it: see docs/judge.md).
MAX_HOLD_SCALE = 8
EXPOSED_SHARE = 0.02  # more than this share of timed calls launched past the hold: time again


# The parts of a call the worker times on the host (host_us in its reply): making inputs (and poison),
# flushing L2 and the census before the call, the hold and the launch, waiting for the GPU (and the
# output snapshot), the checks after the call.
HOST_PARTS = ("inputs", "prepare", "launch", "sync", "checks")


class CallCosts:
    """Sums, over timed calls, of the host time of each part the worker reports (HOST_PARTS) and
    of the rest of the round trip (pipe, pickling, the judge's own bookkeeping): what the timing phase's
    wall time is made of, against the GPU time of the kernels themselves."""

    def __init__(self):
        self.calls = 0
        self.sums = dict.fromkeys(HOST_PARTS + ("round_trip", "kernel"), 0.0)

    def add(self, reply: dict):
        parts = reply.get("host_us")
        if not parts:
            return
        self.calls += 1
        for part in HOST_PARTS:
            self.sums[part] += parts[part]
        self.sums["round_trip"] += max(0.0, reply["wall_us"] - sum(parts.values()))
        self.sums["kernel"] += reply.get("us") or 0.0

    def merge(self, other: "CallCosts"):
        self.calls += other.calls
        for part, value in other.sums.items():
            self.sums[part] += value

    def summary(self) -> dict:
        """{"calls": n, "mean_us": {part: mean host us per call, "kernel": mean kernel us}}."""
        if not self.calls:
            return {}
        return {"calls": self.calls, "mean_us": {k: round(v / self.calls, 1) for k, v in self.sums.items()}}


def launch_exposed(launch_us: float | None, hold_scale: float) -> bool:
    """Did this call's launch (host time from queueing the hold to queueing its end event) outlast the
    hold? Then the GPU may have idled inside the timed window. The hold is LAUNCH_HOLD_US at the boost
    clock and longer at any lower one, so this errs towards timing again."""
    return launch_us is not None and launch_us > LAUNCH_HOLD_US * hold_scale


def too_many_exposed(exposed: int, calls: int) -> bool:
    """One stray slow launch moves a median by nothing; a share of them is a busy host."""
    return exposed > max(1, EXPOSED_SHARE * calls)


def starting_hold_scale(warmup_launches_us: list[float]) -> int:
    """The smallest power-of-two hold scale (up to MAX_HOLD_SCALE) that covers the slowest but one of
    the reference's warm-up launches with a quarter to spare; 1 when none were measured (the CPU). The
    slowest one is left out: the first call of a shape may allocate or pick a cuBLAS algorithm."""
    if not warmup_launches_us:
        return 1
    launches = sorted(warmup_launches_us)
    typical = launches[-2] if len(launches) > 1 else launches[-1]
    scale = 1
    while scale < MAX_HOLD_SCALE and typical * 1.25 > LAUNCH_HOLD_US * scale:
        scale *= 2
    return scale


def cycles_for_us(us: float) -> int:
    """Cycles of ``torch.cuda._sleep`` that keep the GPU busy for at least ``us`` microseconds.

    The judge computes this once and hands the same number to both workers: calibrated in each worker,
    one saw the idle clock (375 MHz on the H200) and the other the boost clock (1980 MHz), so their
    holds differed by ~250 us and the outside clock check falsely rejected an honest kernel
    (docs/NOTES.md, 2026-11-30). The fastest of several measurements (the boost clock) is used, so at
    any lower clock the hold only lasts longer.
    """
    global _CYCLES_PER_US
    if _CYCLES_PER_US is None:
        rates = []
        for _ in range(6):  # the first ones raise the clock from idle
            start, end = Event(enable_timing=True), Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(1_000_000)
            end.record()
            end.synchronize()
            rates.append(1_000_000 / max(1.0, start.elapsed_time(end) * 1000.0))
        _CYCLES_PER_US = max(rates)
    return int(us * _CYCLES_PER_US)


class Timer:
    """One timed call. On CUDA: events on the current stream around the call (``us``), and a third
    event recorded after the device-wide synchronize: ``gap_us`` from the end event to it is how long
    the device kept working after the kernel's stream said it was done. Work left on another stream
    shows there, and the judge compares it with the reference's gap. On the CPU: ``perf_counter_ns``."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        if self.cuda:
            self.start, self.end = Event(enable_timing=True), Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = perf_counter_ns()

    def stop(self):
        if self.cuda:
            self.end.record()
        else:
            self.t1 = perf_counter_ns()

    def read(self) -> dict:
        """Call after the device was synchronized."""
        if not self.cuda:
            return {"us": (self.t1 - self.t0) / 1000.0}
        settled = Event(enable_timing=True)
        settled.record()
        settled.synchronize()
        return {"us": self.start.elapsed_time(self.end) * 1000.0, "gap_us": self.end.elapsed_time(settled) * 1000.0}
