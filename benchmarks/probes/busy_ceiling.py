"""The most of a GPU's time the judge's timing protocol can keep busy, with nothing else in the way.

The loop's busy-share goal is to keep the GPU busy at least 70% of a run (NVML's utilization.gpu: the share of
time any kernel runs). Whatever a loop overlaps, a microsecond kernel's timed calls are its densest GPU
work: correctness calls and compiles keep the GPU busier than that only if they run more kernels.
So this script times one candidate's calls back to back in one process, as the judge's worker makes
each of them (``ratchet.judge.worker.Harness.call``: fresh inputs in place, L2 flush, the launch hold,
CUDA events, a device-wide synchronize, the guards' checks), with no pipe, no reference and no other
evaluation in between, while a thread samples NVML every 20 ms. For scale it runs the same shape:

- ``protocol, eager`` / ``protocol, graph``: the judge's timed call, eagerly and under graph replay;
- ``protocol, no guards``: the same without the checks after each call (what ``guards=False`` skips);
- ``kernel back to back``: graph replays with nothing between them, a synchronize after every 100 (what
  a loop of bare calls keeps busy; its inputs are never refreshed, so it is not a measurement).

Columns: calls per second, wall time per call, NVML's busy share, and the share of wall time that is
the kernel itself (its CUDA-event time); ``hold`` is the launch hold's share at the boost clock.

    python -m benchmarks.probes.busy_ceiling --task benchmarks/tasks/rmsnorm_decode.py \\
        --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --where T=1 H=4096 --out out/
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.busy_ceiling ...")

from benchmarks.common import command_line, record_results, refused


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, help="task name or task file")
    parser.add_argument("--seed-file", required=True, help="the candidate whose calls are timed")
    parser.add_argument("--config", default="{}", help="the candidate's config as JSON (default: its defaults)")
    parser.add_argument("--where", nargs="*", default=[], metavar="K=V",
                        help="the public shape to time (default: the task's first GPU shape)")
    parser.add_argument("--seconds", type=float, default=8.0, help="wall time of each row (default 8)")
    parser.add_argument("--out", default=None, help="folder for busy_ceiling.md and .json")
    return parser.parse_args(argv)


def resolve(args: argparse.Namespace):
    """(task, candidate, config, shape) from the arguments; ValueError (or the loaders' errors) says what
    is wrong with them."""
    from ratchet.candidate import load_candidate
    from ratchet.task import load_task

    if args.seconds <= 0:
        raise ValueError(f"--seconds wants a positive number, got {args.seconds:g}")
    try:
        config = json.loads(args.config)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--config is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError("--config wants a JSON object")
    task = load_task(args.task)
    candidate = load_candidate(Path(args.seed_file))
    return task, candidate, candidate.resolve_config(config), pick_shape(task, args.where)


def pick_shape(task, where: list[str]) -> dict:
    """The first public GPU shape with the sizes of ``where`` (``K=V`` items); ValueError when none has."""
    from benchmarks.common import parse_where, subset_task

    return dict(subset_task(task, "cuda", shapes=1, where=parse_where(where)).shape_set("cuda").public[0])


def run_row(harness, shape: dict, dtype: str, seconds: float, extra: dict, sampler_cls) -> dict:
    """Timed calls back to back for ``seconds`` under an NVML sampler."""
    rng = random.Random(0)
    msg = {"shape": shape, "dtype": dtype, **extra}
    for _ in range(3):  # warm-up: compile, allocator, clocks
        harness.call(dict(msg, seed=rng.getrandbits(62), rng_seed=rng.getrandbits(62)))
    sampler = sampler_cls()
    sampler.start()
    kernel_us, calls, started = 0.0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        reply = harness.call(dict(msg, seed=rng.getrandbits(62), rng_seed=rng.getrandbits(62)))
        kernel_us += reply["us"]
        calls += 1
    wall_us = (time.perf_counter() - started) * 1e6
    sampler.stop.set()
    sampler.join()
    return {"calls": calls, "wall_us": wall_us, "kernel_us": kernel_us, "samples": sampler.samples}


def back_to_back(harness, shape: dict, dtype: str, seconds: float, graph_key: str, sampler_cls) -> dict:
    """Graph replays of the captured call with nothing between them: an upper bound, not a measurement."""
    import torch

    graph = harness.graphs[graph_key][0]
    sampler = sampler_cls()
    sampler.start()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(100):
            graph.replay()
        calls += 100
        torch.cuda.synchronize()  # keeps the queue short, so the host clock and the GPU agree
    wall_us = (time.perf_counter() - started) * 1e6
    sampler.stop.set()
    sampler.join()
    # Each call's own time is not measured here (events between replays would be work of their own).
    return {"calls": calls, "wall_us": wall_us, "kernel_us": None, "samples": sampler.samples}


def summary(label: str, row: dict, hold_us: float | None) -> dict:
    samples = row["samples"]
    return {"row": label, "calls": row["calls"], "calls_per_s": round(row["calls"] / (row["wall_us"] / 1e6), 1),
            "wall_us_per_call": round(row["wall_us"] / row["calls"], 1),
            "busy_nvml_pct": round(sum(samples) / len(samples), 1) if samples else None,
            "kernel_pct": None if row["kernel_us"] is None else round(100 * row["kernel_us"] / row["wall_us"], 2),
            "hold_pct": round(100 * hold_us * row["calls"] / row["wall_us"], 1) if hold_us else None}


def render(rows: list[dict], header: str) -> str:
    lines = [header, "", "| row | calls | calls/s | wall us per call | NVML busy | kernel share | hold share |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['row']} | {r['calls']} | {r['calls_per_s']:g} | {r['wall_us_per_call']:g} | "
              f"{r['busy_nvml_pct']}% | {'-' if r['kernel_pct'] is None else str(r['kernel_pct']) + '%'} | "
              f"{'-' if r['hold_pct'] is None else str(r['hold_pct']) + '%'} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from ratchet.candidate import CandidateError
    from ratchet.judge.timing import LAUNCH_HOLD_US, cycles_for_us
    from ratchet.judge.worker import Harness
    from ratchet.task import TaskError

    try:  # the arguments first, so a wrong one is said on any machine
        task, candidate, config, shape = resolve(args)
    except (TaskError, CandidateError, ValueError) as exc:
        return refused("busy_ceiling", exc)
    if not torch.cuda.is_available():
        return refused("busy_ceiling", "needs a CUDA device (NVML's busy share means nothing on the CPU)")
    from benchmarks.probes.loop_throughput import BusySampler

    dtype = str(task.dtypes[0]).removeprefix("torch.")
    harness = Harness()
    reply = harness.load({"task": task.source_path or task.name, "device": "cuda", "candidate": candidate.path,
                          "kind": candidate.kind, "config": config, "hold_cycles": cycles_for_us(LAUNCH_HOLD_US)})
    if "error" in reply:
        return refused("busy_ceiling", f"{reply['error']}: {reply['detail']}")
    key = "busy-ceiling"
    captured = harness.capture({"shape": shape, "dtype": dtype, "seed": 1, "graph_key": key}).get("captured")
    timed = {"flush": True, "guards": True, "hold_scale": 1}
    rows = [summary("protocol, eager", run_row(harness, shape, dtype, args.seconds, dict(timed, mode="eager"),
                                               BusySampler), LAUNCH_HOLD_US)]
    if captured:
        rows.append(summary("protocol, graph", run_row(harness, shape, dtype, args.seconds,
                                                       dict(timed, mode="graph", graph_key=key), BusySampler),
                            LAUNCH_HOLD_US))
    rows.append(summary("protocol, no guards", run_row(harness, shape, dtype, args.seconds,
                                                       dict(timed, mode="eager", guards=False), BusySampler),
                        LAUNCH_HOLD_US))
    if captured:
        rows.append(summary("kernel back to back (graph)", back_to_back(harness, shape, dtype, args.seconds, key,
                                                                        BusySampler), None))
    header = (f"{torch.cuda.get_device_name()} {time.strftime('%Y-%m-%d')}, torch {torch.__version__}: "
              f"{task.name} {shape} {dtype}, {Path(candidate.path).name} {config}, {args.seconds:g} s a row; "
              f"one process, no reference, no pipe: a ceiling for the loop's busy share, not a loop")
    table = render(rows, header)
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "busy_ceiling.md").write_text(table + "\n")
        (out / "busy_ceiling.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    record_results("busy_ceiling", [{"task": task.name, "shape": shape, "dtype": dtype, "candidate": Path(candidate.path).name,
                                     "config": config, "seconds_per_row": args.seconds, **row} for row in rows],
                   device="cuda", command=command_line("benchmarks.probes.busy_ceiling", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
