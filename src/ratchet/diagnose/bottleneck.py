"""What limits a judged kernel on one shape: memory, compute or overhead.

From the figures every verdict row carries (median time, the roofline floor, achieved bytes and FLOPs
per second, eager and CUDA-graph times) and the device's ceilings:
- overhead-bound: launches, reductions and synchronisation cost more than moving the bytes: the time is
  more than OVERHEAD_FACTOR x a floor under OVERHEAD_TINY_US, or replaying the call in a CUDA graph made
  it more than GRAPH_GAIN x faster (the launch path itself was a large share of the eager time);
- otherwise compute-bound when the arithmetic intensity (FLOPs per byte) reaches the ridge point
  (matmul rate / copy bandwidth), else memory-bound.
The rule above needs only what the judge measured. Where ncu could profile the call (``ratchet.diagnose.ncu``,
one call of the largest public shape, never part of the verdict), ``classify_with_counters`` refines the
class with what the hardware says (COUNTER_RULE):
- overhead-bound when the GPU ran kernels for under GPU_BUSY_SHARE of the judged time (launch gaps);
- memory-bound when DRAM throughput reaches BUSY_PCT of its peak;
- else compute-bound when SM throughput reaches BUSY_PCT of its peak;
- else (neither unit busy) overhead-bound when the call launched OVERHEAD_KERNELS or more kernels or its
  kernels ran under OVERHEAD_KERNEL_US each on average: fixed costs, not bytes or FLOPs, dominate;
- else the roofline's class stands (a few long kernels keeping neither unit busy are latency-bound,
  which the three classes do not name; the counters shown next to the class say so).
"""

from __future__ import annotations

OVERHEAD_TINY_US = 5.0
OVERHEAD_FACTOR = 3.0
GRAPH_GAIN = 1.5

MEMORY, COMPUTE, OVERHEAD, UNKNOWN = "memory-bound", "compute-bound", "overhead-bound", "?"

RULE = (f"overhead-bound when the time is over {OVERHEAD_FACTOR:g}x a floor under {OVERHEAD_TINY_US:g} µs or a "
        f"CUDA graph made the call over {GRAPH_GAIN:g}x faster; else compute-bound when FLOPs per byte reach the "
        f"ridge point (matmul rate / copy bandwidth), memory-bound below it")


# Counter thresholds (classify_with_counters). 60% of peak is where Nsight Compute's own guidance calls a
# unit the limiter; the overhead figures are a few launches' latency (~2-5 µs each on current GPUs).
BUSY_PCT = 60.0
GPU_BUSY_SHARE = 0.5
OVERHEAD_KERNELS = 4
OVERHEAD_KERNEL_US = 10.0

COUNTER_RULE = (f"with ncu counters: overhead-bound when kernels ran under {GPU_BUSY_SHARE:.0%} of the judged "
                f"time; memory-bound when DRAM throughput is at least {BUSY_PCT:g}% of peak; else compute-bound "
                f"when SM throughput is at least {BUSY_PCT:g}%; else overhead-bound with {OVERHEAD_KERNELS}+ kernels "
                f"or kernels under {OVERHEAD_KERNEL_US:g} µs on average; else the roofline's class")


def classify(flops: float | None, nbytes: float | None, ridge: float | None, median_us: float | None = None,
             floor_us: float | None = None, eager_us: float | None = None, graph_us: float | None = None) -> str:
    if median_us and floor_us and floor_us < OVERHEAD_TINY_US and median_us > OVERHEAD_FACTOR * floor_us:
        return OVERHEAD
    if eager_us and graph_us and eager_us > GRAPH_GAIN * graph_us:
        return OVERHEAD
    if flops is None or not nbytes:
        return UNKNOWN
    if not flops:
        return MEMORY
    intensity = flops / nbytes
    if ridge is None:
        return MEMORY if intensity < 1.0 else UNKNOWN  # every CPU's and GPU's ridge point is above 1 FLOP/B
    return COMPUTE if intensity >= ridge else MEMORY


def ridge_point(ceilings: dict | None) -> float | None:
    if not ceilings or not ceilings.get("copy_tbps") or not ceilings.get("matmul_tflops"):
        return None
    return ceilings["matmul_tflops"] / ceilings["copy_tbps"]


def classify_row(row: dict, ceilings: dict | None) -> str:
    """The class of one verdict row (``Verdict.to_json()['shapes'][i]``); ``ceilings`` as the verdict
    records them. Bytes and FLOPs come back from the achieved rates (both over the same median)."""
    median = row.get("median_us")
    if not median:
        return UNKNOWN
    tbps, tflops = row.get("achieved_tbps"), row.get("achieved_tflops")
    nbytes = tbps * median * 1e6 if tbps else None  # TB/s x µs = 1e6 bytes
    flops = tflops * median * 1e6 if tflops is not None else None
    return classify(flops, nbytes, ridge_point(ceilings), median, row.get("floor_us"),
                    row.get("eager_median_us"), row.get("graph_median_us"))


def classify_with_counters(row_class: str, ncu_summary, median_us: float | None = None) -> str:
    """``row_class`` (the roofline rule's) refined by ncu's summary of the call (``ratchet.diagnose.ncu.Summary`` or
    its JSON); ``median_us`` is the judge's time for the profiled shape, for the launch-gap test. No
    counters (None, or neither DRAM nor SM throughput read): ``row_class`` unchanged."""
    if ncu_summary is None:
        return row_class
    get = ncu_summary.get if isinstance(ncu_summary, dict) else lambda key: getattr(ncu_summary, key, None)
    dram, sm = get("dram_pct"), get("sm_pct")
    if dram is None and sm is None:
        return row_class
    busy_us, kernels = get("duration_us"), get("kernels") or 0
    if median_us and busy_us is not None and busy_us < GPU_BUSY_SHARE * median_us:
        return OVERHEAD
    if dram is not None and dram >= BUSY_PCT:
        return MEMORY
    if sm is not None and sm >= BUSY_PCT:
        return COMPUTE
    if kernels >= OVERHEAD_KERNELS or (busy_us is not None and kernels and busy_us / kernels < OVERHEAD_KERNEL_US):
        return OVERHEAD
    return row_class


def counters_for_row(row: dict, counters: dict | None) -> dict | None:
    """The stored ncu counters (an attempt's ``extra['counters']``) if they were read on this verdict row's
    shape and dtype, else None. Graph-mode rows are left alone: ncu profiled an eager call."""
    if not counters or not counters.get("available") or row.get("mode") == "graph":
        return None
    if counters.get("shape") != row.get("shape") or counters.get("dtype") != row.get("dtype"):
        return None
    return counters


def classify_row_with_counters(row: dict, ceilings: dict | None, counters: dict | None) -> tuple[str, str]:
    """(class, counters note) of one verdict row: the roofline class refined by the counters read on this
    row's shape, and ``ncu: DRAM 91%, ...`` (empty when there are none)."""
    from ratchet.diagnose.ncu import describe

    klass = classify_row(row, ceilings)
    mine = counters_for_row(row, counters)
    if mine is None:
        return klass, ""
    return classify_with_counters(klass, mine.get("summary"), row.get("median_us")), describe(mine.get("summary"))


def labelled(klass: str, note: str) -> str:
    """``memory-bound (ncu: DRAM 91%, SM 23%, ...)``, or the class alone."""
    return f"{klass} ({note})" if note else klass
