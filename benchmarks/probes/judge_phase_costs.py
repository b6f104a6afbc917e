"""Where an evaluation's correctness time goes: the worker's harness, run in this process, timed op by op.

For each (shape, dtype) of a task's device shape set: the first call (compiles), a plain call, a call
with the poison, a call under the profiler (the forbidden-op check), the fetch of outputs and inputs,
and the float64 reference the judge computes for it. Writes ``judge_phase_costs.md`` under --out.

    python -m benchmarks.probes.judge_phase_costs --task rmsnorm \
        --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --shapes 4 --out out/
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.judge_phase_costs ...")

import torch

from benchmarks.common import command_line, record_results
from ratchet.judge.worker import Harness
from ratchet.task import load_task


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, (time.perf_counter() - t0) * 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--seed-file", required=True)
    parser.add_argument("--shapes", type=int, default=4, help="the first N public shapes of each dtype")
    parser.add_argument("--out", default="out")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    task = load_task(args.task)
    harness = Harness()
    _, load_ms = timed(lambda: harness.load({"device": device, "task": args.task, "candidate": args.seed_file}))
    rows = [f"{task.name} / {Path(args.seed_file).name} on {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}, "
            f"{time.strftime('%Y-%m-%d')}; load {load_ms:.0f} ms",
            "| shape | dtype | first call ms | call ms | poisoned ms | profiled ms | fetch ms | float64 ref ms |",
            "|---|---|---|---|---|---|---|---|"]
    seed, records = 0, []
    for dtype in task.dtypes:
        for shape in task.shape_set(device).public[: args.shapes]:
            def call(**extra):
                nonlocal seed
                seed += 1
                msg = {"shape": dict(shape), "dtype": str(dtype).removeprefix("torch."), "seed": seed,
                       "rng_seed": seed, "flush": False, **extra}
                reply = harness.call(msg)
                assert "error" not in reply, reply
                return reply
            costs = [timed(call)[1], timed(call)[1], timed(lambda: call(poison=True))[1],
                     timed(lambda: call(profile=True))[1],
                     timed(lambda: harness.fetch({"inputs": True}))[1]]
            generator = torch.Generator(device=device).manual_seed(seed)
            inputs = task.make_inputs(dict(shape), dtype, device, generator)
            upcast = tuple(x.to(task.reference_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                           for x in inputs)
            costs.append(timed(lambda: task.reference(*upcast))[1])
            label = " ".join(f"{k}={v}" for k, v in shape.items())
            rows.append(f"| {label} | {str(dtype).removeprefix('torch.')} | " + " | ".join(f"{c:.1f}" for c in costs) + " |")
            print(rows[-1], flush=True)
            records.append({"task": task.name, "candidate": Path(args.seed_file).name, "shape": dict(shape),
                            "dtype": str(dtype).removeprefix("torch."), "load_ms": load_ms,
                            **dict(zip(("first_call_ms", "call_ms", "poisoned_ms", "profiled_ms", "fetch_ms",
                                        "float64_reference_ms"), costs))})
    text = "\n".join(rows)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "judge_phase_costs.md").write_text(text + "\n")
    print(text)
    record_results("judge_phase_costs", records, device=device,
                   command=command_line("benchmarks.probes.judge_phase_costs", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
