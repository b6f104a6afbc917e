"""Where one call of a candidate spends its GPU time: each kernel it launches, by torch.profiler (CUPTI).

The judge times a call as a whole; this says which of its kernels the time is in (split-K's partials
against its merge, a seed's main kernel against the copies around it) and how the kernels' sum compares
with the call's own time under a CUDA graph, whose difference is the launches' gaps. It is a diagnostic,
not a verdict: no checks, the candidate in this process. L2 is flushed before each call by inverting a
buffer twice its size (``bitwise_not``: a kernel no candidate of these tasks launches, so its launches
are told apart and left out of the table). That is the judge's flush before 2026-11-30 (flush write-back), without its
second, read-only pass: the first kernel to touch memory pays the write-back of the flush's dirty lines
(3-5 µs on the H200, benchmarks/probes/flush_cost.py), so read the shares and the gaps, not the absolute times.

    python -m benchmarks.probes.kernel_breakdown --task decode_attention \\
        --seed-file src/ratchet/tasks/decode_attention/seeds/triton_split_k.py --where B=1 L=4096 \\
        --config '{"SPLITS": 32}'
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.kernel_breakdown ...")

import torch
from benchmarks.common import command_line, parse_where, record_results, refused, subset_task

from ratchet.candidate import CandidateError, load_candidate
from ratchet.task import Task, TaskError, load_task


@dataclass(frozen=True)
class KernelRow:
    name: str
    launches_per_call: float
    us_per_call: float


def kernel_rows(events: list[tuple[str, float]], calls: int) -> list[KernelRow]:
    """(kernel name, device µs) per launch over ``calls`` calls -> one row per name, the longest first."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for name, us in events:
        total[name] += us
        count[name] += 1
    rows = [KernelRow(name, count[name] / calls, total[name] / calls) for name in total]
    return sorted(rows, key=lambda r: -r.us_per_call)


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


_FLUSH_KERNEL = "bitwise_not"


def l2_flusher():
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    buffer = torch.zeros(2 * int(getattr(props, "L2_cache_size", 0) or 64 * 2**20) // 4, dtype=torch.int32,
                         device="cuda")
    return buffer.bitwise_not_


def _graph_us(fn, flush, replays: int = 50) -> float:
    """Median µs of one call replayed from a CUDA graph after an L2 flush (launch gaps inside the call
    included)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return sorted(times)[len(times) // 2]


def breakdown(task: Task, seed_file: Path, config: dict, calls: int, records: list[dict] | None = None) -> str:
    """The table; each kernel's figures are appended to ``records`` too when given."""
    spec = importlib.util.spec_from_file_location("ratchet_breakdown_candidate", seed_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dtype = task.dtypes[0]
    lines = [f"{torch.cuda.get_device_name()}, {task.name} {seed_file.name} {json.dumps(config)}, {dtype}",
             "| shape | kernel | launches per call | µs per call | share |", "|---|---|---|---|---|"]
    flush = l2_flusher()
    for shape in task.shape_set("cuda").public:
        generator = torch.Generator(device="cuda").manual_seed(0)
        inputs = task.make_inputs(shape, dtype, "cuda", generator)

        def call():
            return module.kernel(*inputs, **config)

        for _ in range(3):  # compiles and warms up outside the profile
            call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                flush()
                call()
            torch.cuda.synchronize()
        events = [(e.name, e.device_time) for e in prof.events() if e.device_time > 0 and e.device_type ==
                  torch.autograd.DeviceType.CUDA and _FLUSH_KERNEL not in e.name]
        rows = kernel_rows(events, calls)
        total = sum(r.us_per_call for r in rows) or 1.0
        label = " ".join(f"{k}={v}" for k, v in shape.items())
        for r in rows:
            lines.append(f"| {label} | `{_short(r.name)}` | {r.launches_per_call:g} | {r.us_per_call:.2f} | "
                         f"{100 * r.us_per_call / total:.0f}% |")
        graph_us = _graph_us(call, flush)
        lines.append(f"| {label} | **sum of kernels** | | {total:.2f} | |")
        lines.append(f"| {label} | **one call, CUDA graph** | | {graph_us:.2f} | |")
        if records is not None:
            base = {"task": task.name, "candidate": seed_file.name, "config": config, "shape": dict(shape),
                    "dtype": str(dtype).removeprefix("torch.")}
            records += [{**base, "kernel": r.name, "launches_per_call": r.launches_per_call,
                         "us_per_call": r.us_per_call, "share": r.us_per_call / total} for r in rows]
            records.append({**base, "kernel": "(one call, CUDA graph)", "us_per_call": graph_us,
                            "sum_of_kernels_us": total})
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--task", required=True)
    parser.add_argument("--seed-file", type=Path, required=True)
    parser.add_argument("--where", nargs="+", metavar="SIZE=N", help="only public shapes with these sizes")
    parser.add_argument("--config", default="{}", help="JSON config over the seed's default")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per shape")
    args = parser.parse_args(argv)
    try:  # the arguments first, so a wrong one is said on any machine
        task = subset_task(load_task(args.task), "cuda", first_dtype=True, where=parse_where(args.where))
        config = json.loads(args.config)
        if not isinstance(config, dict):
            raise ValueError(f"--config wants a JSON object, got {args.config!r}")
        config = load_candidate(args.seed_file).resolve_config(config)  # the judge's rules for a config
    except (ValueError, OSError, TaskError, CandidateError) as exc:
        return refused("kernel_breakdown", exc)
    if not torch.cuda.is_available():
        return refused("kernel_breakdown", "needs a CUDA device")
    records: list[dict] = []
    print(breakdown(task, args.seed_file, config, args.calls, records))
    record_results("kernel_breakdown", records, device="cuda",
                   command=command_line("benchmarks.probes.kernel_breakdown", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
