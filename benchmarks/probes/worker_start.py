"""Worker starts: the judge's wall time per evaluation with workers forked from the fork server
(judge/forkserver.py, torch already imported) and with workers executed afresh, interleaved; and whether
the verdicts agree. On a GPU it checks that forked GPU workers (the default since 2026-12-07) give the
verdicts executed ones give (``RATCHET_FORKSERVER=0``).

    python -m benchmarks.probes.worker_start --task tests/data/tasks/axpby.py \
        --candidate tests/data/candidates/axpby_honest.py --device cpu
    python -m benchmarks.probes.worker_start --task benchmarks/tasks/rmsnorm_one_shape.py \
        --candidate src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --device cuda

Exit status 1 when a verdict differs between the two ways (or is not a pass) or when the fork server
refused to fork (then the "forked" workers were executed), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.worker_start ...")

import torch

from benchmarks.common import command_line, device_label, record_results
from ratchet.candidate import CandidateError, load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.forkserver import OPT_OUT_ENV, ForkServer
from ratchet.task import TaskError, load_task

WAYS = {"forked": "1", "executed": "0"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations each way (default 3)")
    parser.add_argument("--no-timing", action="store_true", help="correctness only")
    parser.add_argument("--out", default=None, help="folder for worker_start.md")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA GPU, and this machine has none")
    try:
        task, candidate = load_task(args.task), load_candidate(args.candidate)
    except (TaskError, CandidateError, OSError) as exc:
        print(f"worker_start: {exc}", file=sys.stderr)
        return 2
    runs: dict[str, list] = {way: [] for way in WAYS}
    before = os.environ.get(OPT_OUT_ENV)
    try:
        for _ in range(args.repeats):
            for way, value in WAYS.items():
                os.environ[OPT_OUT_ENV] = value
                verdict = evaluate(task, candidate, None, JudgeOptions(device=args.device, time_it=not args.no_timing))
                runs[way].append(verdict)
                print(f"{way}: {verdict.verdict} {[r.code for r in verdict.reasons]} {verdict.phases_s} "
                      f"{verdict.judge_wall_s:.2f} s", flush=True)
    finally:
        if before is None:
            os.environ.pop(OPT_OUT_ENV, None)
        else:
            os.environ[OPT_OUT_ENV] = before
    med = lambda way, get: statistics.median(get(v) for v in runs[way])  # noqa: E731
    lines = [f"{device_label(args.device)}, {time.strftime('%Y-%m-%d')}, {Path(args.task).name} / "
             f"{Path(args.candidate).name}, {args.repeats} evaluations each way, interleaved",
             "| workers | verdicts | median wall s | median start s | median correctness s |", "|---|---|---|---|---|"]
    for way in WAYS:
        verdicts = ", ".join(sorted({v.verdict for v in runs[way]}))
        lines.append(f"| {way} | {verdicts} | {med(way, lambda v: v.judge_wall_s):.2f} | "
                     f"{med(way, lambda v: v.phases_s.get('start', 0.0)):.2f} | "
                     f"{med(way, lambda v: v.phases_s.get('correctness', 0.0)):.2f} |")
    # A server that would not fork (its imports mapped the CUDA driver) leaves "forked" workers executed:
    # then nothing here was forked, and the probe says so rather than compare a way with itself.
    refused = sorted(set(ForkServer._refused.values()))
    agree = not refused and all(v.verdict == "pass" and not v.reasons for way in WAYS for v in runs[way])
    if refused:
        lines.append("no worker was forked, the server refused: " + "; ".join(refused))
    lines.append("every verdict a clean pass both ways" if agree else "verdicts differ or fail: see the lines above")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "worker_start.md").write_text(text + "\n")
    record_results("worker_start", [
        {"task": Path(args.task).name, "candidate": Path(args.candidate).name, "workers": way,
         "repeats": args.repeats, "median_wall_s": med(way, lambda v: v.judge_wall_s),
         "median_start_s": med(way, lambda v: v.phases_s.get("start", 0.0)),
         "verdicts": sorted({v.verdict for v in runs[way]})} for way in WAYS],
        device=args.device, command=command_line("benchmarks.probes.worker_start", argv))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
