"""What limits a judged kernel on one shape: memory, compute or overhead.

From the figures every verdict row carries (median time, the roofline floor, achieved bytes and FLOPs
per second, eager and CUDA-graph times) and the device's ceilings:
- overhead-bound: launches, reductions and synchronisation cost more than moving the bytes: the time is
  more than OVERHEAD_FACTOR x a floor under OVERHEAD_TINY_US, or replaying the call in a CUDA graph made
  it more than GRAPH_GAIN x faster (the launch path itself was a large share of the eager time);
- otherwise compute-bound when the arithmetic intensity (FLOPs per byte) reaches the ridge point
  (matmul rate / copy bandwidth), else memory-bound.
Hardware counters (ncu's DRAM and SM throughput) would refine this where they can be read; the rule
here needs only what the judge measured.
"""

from __future__ import annotations

OVERHEAD_TINY_US = 5.0
OVERHEAD_FACTOR = 3.0
GRAPH_GAIN = 1.5

MEMORY, COMPUTE, OVERHEAD, UNKNOWN = "memory-bound", "compute-bound", "overhead-bound", "?"

RULE = (f"overhead-bound when the time is over {OVERHEAD_FACTOR:g}x a floor under {OVERHEAD_TINY_US:g} µs or a "
        f"CUDA graph made the call over {GRAPH_GAIN:g}x faster; else compute-bound when FLOPs per byte reach the "
        f"ridge point (matmul rate / copy bandwidth), memory-bound below it")


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
