"""False rejects, counted: honest candidates judged again and again, and every verdict that is not a clean
pass counted by reason code. Zero false rejects is part of the judge's bar; a test can only show it for a
few evaluations, this counts it over a thousand.

The honest candidates: the honest twins of tests/redteam/honest/ (each against its task, in its mode:
untimed, or timed with the red team's short policy; GPU twins only with --device cuda) and the built-in
tasks' seeds (on the CPU those whose file name starts with ``cpu``, timed with the same short policy).
Untimed evaluations run ``--jobs`` at a time; timed ones one at a time, so no clock is shared.

    python -m benchmarks.probes.false_rejects --device cpu                    # >= 1,000 honest evaluations
    python -m benchmarks.probes.false_rejects --device cpu --busy             # the same, every core kept busy
    python -m benchmarks.probes.false_rejects --device cpu --evaluations 30   # a quick look

Prints the evaluations made and the false rejects by verdict and reason code (with the candidates that
got them); ``--out FILE`` also writes them as JSON. Exit status 1 on any false reject, 2 on bad usage.
CPU timings say nothing about GPUs; the count of false rejects is what this measures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BURN = ("import os, sys, time\nparent, end = int(sys.argv[1]), time.time() + float(sys.argv[2])\n"
        "while time.time() < end and os.getppid() == parent:\n    pass\n")


@dataclass(frozen=True)
class Honest:
    name: str  # what the report calls it
    task: str  # a built-in name or a task file
    candidate: Path
    timed: bool
    gpu: bool


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--evaluations", type=int, default=1000,
                        help="this many honest evaluations, in rounds over the candidates (default 1000)")
    parser.add_argument("--busy", action="store_true", help="keep every core busy with a spinning process meanwhile")
    parser.add_argument("--jobs", type=int, default=2, help="untimed evaluations at a time (default 2)")
    parser.add_argument("--only", default=None, help="only candidates whose name contains this")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop starting evaluations once this much wall time is spent (the count covers what ran)")
    parser.add_argument("--seed", type=int, default=0, help="the order of the evaluations in each round")
    parser.add_argument("--out", default=None, help="also write the counts to this JSON file")
    return parser.parse_args(argv)


def honest_candidates(device: str, only: str | None) -> list[Honest]:
    """The red team's honest twins for ``device`` and the built-in seeds that run on it."""
    import importlib.util

    # The one list of honest twins and their tasks, read from the red team's own test file.
    spec = importlib.util.spec_from_file_location("ratchet_redteam_cases", ROOT / "tests" / "redteam" / "test_redteam.py")
    redteam = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = redteam  # its dataclasses look their module up there
    spec.loader.exec_module(redteam)
    HONEST, TASKS = redteam.HONEST, redteam.TASKS

    from ratchet.task import builtin_task_names, load_task

    out = []
    for case in HONEST:
        gpu = case.mode.startswith("gpu")
        if device == "cuda" or not gpu:
            out.append(Honest(case.id, TASKS[case.task], case.path, case.mode in ("timed", "gpu_timed", "gpu_graph"),
                              gpu))
    for name in builtin_task_names():
        task = load_task(name)
        for seed in task.seeds():
            if device == "cpu" and not seed.name.startswith("cpu"):
                continue
            out.append(Honest(f"{name}/{seed.stem}", name, seed, True, device == "cuda"))
    if only:
        out = [h for h in out if only in h.name]
    return out


def options_for(h: Honest, device: str):
    from ratchet.judge import JudgeOptions
    from ratchet.judge.timing import TimingPolicy

    quick = TimingPolicy(cap_s=0.25, max_reps=48, min_reps=8, target_rse=0.05)  # the red team's timed policy
    return JudgeOptions(device=device, time_it=h.timed, policy=quick if device == "cpu" else None)


def judge(h: Honest, device: str) -> dict:
    from ratchet.candidate import load_candidate
    from ratchet.judge import evaluate
    from ratchet.task import load_task

    started = time.perf_counter()
    v = evaluate(load_task(h.task), load_candidate(h.candidate), None, options_for(h, device))
    return {"name": h.name, "verdict": v.verdict, "codes": [r.code for r in v.reasons],
            "detail": v.reasons[0].detail[:300] if v.reasons else "", "wall_s": time.perf_counter() - started}


def start_burners(seconds: float) -> list[subprocess.Popen]:
    """One spinning process per core, ending by itself after ``seconds`` or once this process is gone."""
    return [subprocess.Popen([sys.executable, "-c", BURN, str(os.getpid()), str(seconds)])
            for _ in range(os.cpu_count() or 1)]


def run(args) -> dict:
    candidates = honest_candidates(args.device, args.only)
    if not candidates:
        raise ValueError(f"no honest candidate for --device {args.device}" + (f" matches --only {args.only}"
                                                                               if args.only else ""))
    rounds = max(1, math.ceil(args.evaluations / len(candidates)))
    rng = random.Random(args.seed)
    plan = []  # whole rounds, each in its own shuffled order, cut at the count asked for
    for _ in range(rounds):
        order = candidates[:]
        rng.shuffle(order)
        plan.append(order)
    left = args.evaluations
    for r, order in enumerate(plan):
        plan[r], left = order[:left], left - len(order[:left])
    results: list[dict] = []
    burners = start_burners(24 * 3600) if args.busy else []
    started = time.perf_counter()
    done_rounds = reported = 0

    def spent() -> bool:
        return args.seconds is not None and time.perf_counter() - started >= args.seconds

    def record(batch: list[dict]):
        # Each false reject as soon as it is known, and the counts so far saved: a long count may be cut.
        nonlocal reported
        results.extend(batch)
        for res in results[reported:]:
            if is_false_reject(res):
                print(f"false reject: {res['name']}: {res['verdict']} {res['codes']}: {res['detail']}",
                      file=sys.stderr, flush=True)
        reported = len(results)
        if args.out:
            summary = summarize(results, candidates, done_rounds, args, time.perf_counter() - started)
            Path(args.out).write_text(json.dumps(summary, indent=2))

    try:
        for r, order in enumerate(plan):
            # A GPU round is about an hour (every seed timed in full), so --seconds is looked at between
            # evaluations, not only between rounds.
            untimed = [h for h in order if not h.timed]
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                for i in range(0, len(untimed), max(1, args.jobs)):
                    if spent():
                        break
                    record(list(pool.map(lambda h: judge(h, args.device), untimed[i:i + max(1, args.jobs)])))
            for h in order:
                if h.timed and not spent():
                    record([judge(h, args.device)])
            if spent() and len(results) < sum(map(len, plan[:r + 1])):
                print(f"stopped in round {r + 1}: --seconds {args.seconds:g} spent", file=sys.stderr, flush=True)
                break
            done_rounds = r + 1
            rejects = sum(map(is_false_reject, results))
            print(f"round {r + 1}/{rounds}: {len(results)} evaluations, {rejects} false rejects, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            if spent():
                print(f"stopped after round {r + 1}: --seconds {args.seconds:g} spent", file=sys.stderr, flush=True)
                break
    finally:
        for p in burners:
            p.kill()
            p.wait()
    return summarize(results, candidates, done_rounds, args, time.perf_counter() - started)


def is_false_reject(res: dict) -> bool:
    """An honest candidate's verdict that is not a clean pass."""
    return res["verdict"] != "pass" or bool(res["codes"])


def summarize(results: list[dict], candidates: list[Honest], rounds: int, args, wall_s: float) -> dict:
    by_code: Counter = Counter()
    who: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, str] = {}
    for res in results:
        if not is_false_reject(res):
            continue
        for code in res["codes"] or ["no_reason"]:
            key = f"{res['verdict']} {code}"
            by_code[key] += 1
            who[key][res["name"]] += 1
            examples.setdefault(key, f"{res['name']}: {res['detail']}")
    false_rejects = sum(map(is_false_reject, results))
    return {"evaluations": len(results), "false_rejects": false_rejects, "by_code": dict(by_code),
            "candidates_by_code": {k: dict(v) for k, v in who.items()}, "examples": examples,
            "candidates": [h.name for h in candidates], "rounds": rounds, "device": args.device, "busy": args.busy,
            "wall_s": round(wall_s, 1), "median_wall_s": _median([res["wall_s"] for res in results])}


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return round(xs[len(xs) // 2], 2) if xs else None


def render(s: dict) -> str:
    lines = [f"{s['evaluations']} honest evaluations ({len(s['candidates'])} candidates x {s['rounds']} rounds, "
             f"device {s['device']}, cores kept busy: {'yes' if s['busy'] else 'no'}) in {s['wall_s']:.0f} s "
             f"(median {s['median_wall_s']} s each)",
             f"false rejects: {s['false_rejects']}"]
    for key, n in sorted(s["by_code"].items(), key=lambda kv: -kv[1]):
        names = ", ".join(f"{name} x{c}" for name, c in sorted(s["candidates_by_code"][key].items()))
        lines.append(f"  {key}: {n} ({names}); e.g. {s['examples'][key]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.evaluations < 1:
            raise ValueError(f"--evaluations wants a positive number, got {args.evaluations}")
        if args.seconds is not None and args.seconds <= 0:
            raise ValueError(f"--seconds wants a positive number, got {args.seconds:g}")
        if args.jobs < 1:
            raise ValueError(f"--jobs wants a positive number, got {args.jobs}")
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("--device cuda needs a CUDA device")
        summary = run(args)
    except ValueError as exc:
        print(f"false_rejects: {exc}", file=sys.stderr)
        return 2
    print(render(summary))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2))
    return 1 if summary["false_rejects"] else 0


if __name__ == "__main__":
    sys.exit(main())
