"""The cost of safety: the judge's wall time per evaluation with its guards and without, interleaved.

"Without" turns off what exists only to catch cheats (poisoning, profiling for forbidden ops, the
deferred-write copies, the thread and process census, verification of timed outputs, the clock
checks, the source scan); correctness against the reference and the timing protocol stay.

    python -m benchmarks.probes.guard_cost --task rmsnorm --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.guard_cost ...")

import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task
from benchmarks.common import command_line, record_results, subset_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--seed-file", required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", type=int, help="only the first N public shapes and the first dtype "
                        "(a full rmsnorm evaluation on the H200 takes minutes)")
    parser.add_argument("--out", default="out")
    args = parser.parse_args(argv)
    task, cand = load_task(args.task), load_candidate(args.seed_file)
    task = subset_task(task, args.device, args.shapes, first_dtype=bool(args.shapes))
    walls = {True: [], False: []}
    phases = {True: [], False: []}
    for _ in range(args.repeats):
        for guarded in (True, False):
            v = evaluate(task, cand, None, JudgeOptions(device=args.device, guards=guarded))
            assert v.verdict == "pass", v.reasons
            walls[guarded].append(v.judge_wall_s)
            phases[guarded].append(v.phases_s)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (2 cores)"
    lines = [f"{name}, {time.strftime('%Y-%m-%d')}, {args.task} / {Path(args.seed_file).name}, "
             f"{args.repeats} evaluations each, interleaved"
             + (f", first {args.shapes} shapes, {task.dtypes[0]}" if args.shapes else ""),
             "| guards | median wall s | start s | correctness s | timing s |", "|---|---|---|---|---|"]
    for guarded in (True, False):
        med = lambda key: statistics.median(p.get(key, 0.0) for p in phases[guarded])  # noqa: E731
        lines.append(f"| {'on' if guarded else 'off'} | {statistics.median(walls[guarded]):.1f} | {med('start'):.1f} | "
                     f"{med('correctness'):.1f} | {med('timing'):.1f} |")
    on, off = statistics.median(walls[True]), statistics.median(walls[False])
    lines.append(f"guards add {on - off:+.1f} s ({100 * (on - off) / off:+.0f}%) per evaluation")
    text = "\n".join(lines)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "guard_cost.md").write_text(text + "\n")
    print(text)
    record_results("guard_cost", [
        {"task": args.task, "candidate": Path(args.seed_file).name, "guards": guarded, "repeats": args.repeats,
         "median_wall_s": statistics.median(walls[guarded]),
         **{f"{key}_s": statistics.median(p.get(key, 0.0) for p in phases[guarded]) for key in ("start", "correctness", "timing")}}
        for guarded in (True, False)], device=args.device, command=command_line("benchmarks.probes.guard_cost", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
