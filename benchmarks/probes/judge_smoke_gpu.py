"""A short GPU check of the judge: a few rmsnorm shapes judged twice (run-to-run agreement of the
median), a microsecond shape with its judge wall time, and the same evaluation with guards'
per-call extras on and the evaluation's own cost printed. For a lease of a few minutes.

    python -m benchmarks.probes.judge_smoke_gpu --out out/
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.judge_smoke_gpu ...")

import torch

from benchmarks.common import command_line, record_results, verdict_rows
from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import ShapeSet, load_task

SHAPES = [{"T": 1, "H": 4096}, {"T": 256, "H": 8192}, {"T": 4096, "H": 8192}, {"T": 16384, "H": 8192}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out")
    parser.add_argument("--seed-file", default="src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = load_task("rmsnorm")
    task = dataclasses.replace(task, gpu=ShapeSet(public=SHAPES, held_out=task.gpu.held_out), dtypes=(torch.bfloat16,))
    cand = load_candidate(args.seed_file)
    runs = []
    for i in range(2):
        t0 = time.perf_counter()
        v = evaluate(task, cand, None, JudgeOptions(device="cuda"))
        runs.append(v.to_json())
        print(f"run {i + 1}: {v.verdict} {[r.code + ': ' + r.detail[:120] for r in v.reasons]} speedup "
              f"{v.speedup} wall {time.perf_counter() - t0:.1f} s", flush=True)
    (out / "judge_smoke.json").write_text(json.dumps({"device": torch.cuda.get_device_name(0),
                                                      "date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=1))
    print(f"\n{torch.cuda.get_device_name(0)}, {time.strftime('%Y-%m-%d')}, rmsnorm bf16, {Path(args.seed_file).name}")
    print("| shape | mode | run 1 µs | run 2 µs | diff % | ref µs | speedup | TB/s | roofline % | graph µs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for a, b in zip(runs[0]["shapes"], runs[1]["shapes"]):
        if a["median_us"] is None or b["median_us"] is None:
            continue
        diff = 100 * (b["median_us"] - a["median_us"]) / a["median_us"]
        print(f"| {a['shape']} | {a['mode']} | {a['median_us']:.2f} | {b['median_us']:.2f} | {diff:+.1f} | "
              f"{a['ref_median_us']:.2f} | {a['speedup']:.2f} | {a['achieved_tbps']:.2f} | "
              f"{100 * a['roofline_fraction']:.0f} | {a['graph_median_us'] or float('nan'):.2f} |")
    print(f"judge wall time per evaluation: {runs[0]['judge_wall_s']:.1f} s, {runs[1]['judge_wall_s']:.1f} s")
    record_results("judge_smoke_gpu", [row for i, run in enumerate(runs) for row in verdict_rows(
        run, task="rmsnorm", candidate=Path(args.seed_file).name, run=i + 1)], device="cuda",
        command=command_line("benchmarks.probes.judge_smoke_gpu", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
