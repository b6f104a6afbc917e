"""Judge seconds per failed, raced (or slow losing) and kept attempt, on a short tuner run.

A run of the tuner over three files made from one seed of the task: the seed itself, a slow twin (honest:
it calls the seed's kernel three times per call) and a wrong twin (its floating-point outputs scaled),
each with the seed's SPACE. The table gives, per class of attempt, how many there were and the judge's
wall seconds (the ledger's ``judge_wall_s``, and their mean by phase: start, first call, the rest of
correctness, timing): the seed's kept and not-kept attempts, the slow twin's (raced where the judge
races, else timed in full and not kept) and the wrong twin's (failed); each class says which files its
attempts came from (an honest file can fail on a noisy machine). A CUDA seed's configs are separate
builds, so an attempt at a config not built yet spends the build in its first call. With ``--src`` given
more than once the same run is made with each Ratchet source tree (e.g. the code before and after a
change) and the table has a column per tree.

    python -m benchmarks.probes.judge_costs --task rmsnorm --device cpu --budget 6
    python -m benchmarks.probes.judge_costs --task rmsnorm --device cuda --budget 9 --src /path/to/old/src --src src

CPU numbers say nothing about GPU speed; they show where the judge's time goes on a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

SLOW = '''

# ---- judge_costs: the slow twin (honest, three calls of the seed's kernel per call) ----
_judge_costs_kernel = kernel


def kernel(*args, **kwargs):
    _judge_costs_kernel(*args, **kwargs)
    _judge_costs_kernel(*args, **kwargs)
    return _judge_costs_kernel(*args, **kwargs)
'''

WRONG = '''

# ---- judge_costs: the wrong twin (floating-point outputs scaled, integer outputs shifted) ----
_judge_costs_kernel = kernel


def _judge_costs_spoil(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_judge_costs_spoil(o) for o in out)
    return out * 1.5 + 1 if out.is_floating_point() else out + 1


def kernel(*args, **kwargs):
    return _judge_costs_spoil(_judge_costs_kernel(*args, **kwargs))
'''

CLASSES = ("failed", "raced", "passed, not kept", "kept")


def default_seed(task: str, device: str) -> Path:
    from ratchet.task import load_task

    seeds = load_task(task).seeds_for(device)
    if not seeds:
        raise SystemExit(f"task {task} has no seed for {device}; give --seed FILE")
    return Path(seeds[0])


def make_files(seed: Path, folder: Path) -> list[Path]:
    source = seed.read_text()
    source = source if source.endswith("\n") else source + "\n"
    files = [folder / f"seed_{seed.name}", folder / f"slow_{seed.name}", folder / f"wrong_{seed.name}"]
    for path, tail in zip(files, ("", SLOW, WRONG)):
        path.write_text(source + tail)
    return files


def run_once(src: str | None, args, files: list[Path], folder: Path) -> list[dict]:
    ledger = folder / "ledger.sqlite"
    env = dict(os.environ, RATCHET_LEDGER=str(ledger))
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    # --seconds: the run stops proposing by itself, so a device call's limit never cuts it before the table
    limit = ["--time", f"{args.seconds}s"] if args.seconds else ["--budget", str(args.budget)]
    task = str(Path(args.task).resolve()) if Path(args.task).is_file() else args.task  # the run's cwd is folder
    cmd = [sys.executable, "-m", "ratchet", "run", task, "--device", args.device, *limit, "--sampler", "random"]
    for path in files:
        cmd += ["--seed", str(path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=folder)
    if proc.returncode != 0:
        raise SystemExit(f"ratchet run failed ({src or 'this tree'}): {proc.stderr.strip()[-2000:]}")
    with sqlite3.connect(ledger) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT seq, candidate_path, verdict, kept, judge_wall_s, extra_json FROM attempts "
                            "ORDER BY seq").fetchall()
    out = []
    for row in rows:
        name = Path(row["candidate_path"]).name
        raced = bool(json.loads(row["extra_json"] or "{}").get("raced"))
        if row["verdict"] != "pass":
            kind = CLASSES[0]
        elif raced:
            kind = CLASSES[1]
        else:
            kind = CLASSES[3] if row["kept"] else CLASSES[2]
        extra = json.loads(row["extra_json"] or "{}")
        phases = dict(extra.get("phases_s") or {})
        # The first call (import, compile: a CUDA config's nvcc build) apart from the rest of the checks.
        host = extra.get("judge_host_s") or {}
        first = float(host.get("first_call") or 0.0)
        if "correctness" in phases:
            phases["first call"] = first
            phases["correctness"] = max(0.0, float(phases["correctness"]) - first)
        # Inside the phases above: the seconds this attempt waited for the device lock while the others
        # in flight were timed (a pipelined run's queue, not this attempt's own work).
        phases[WAIT] = float(host.get("gpu_wait") or 0.0)
        out.append({"seq": row["seq"], "file": name, "verdict": row["verdict"], "kept": bool(row["kept"]),
                    "raced": raced, "judge_wall_s": row["judge_wall_s"], "class": kind,
                    "phases_s": {k: float(v) for k, v in phases.items()}})
    return out


# Where an attempt's seconds went: the verdict's phases_s, with the first call (its compile) taken out of
# the correctness phase.
PHASES = ("start", "first call", "correctness", "timing")
WAIT = "waiting for the GPU"


def table(results: dict[str, list[dict]]) -> str:
    trees = list(results)
    lines = ["| attempt | " + " | ".join(f"{t}: n (files), mean s, median s, mean s by phase ({' / '.join(PHASES)}; "
                                        f"of these {WAIT})" for t in trees) + " |",
             "| --- | " + " | ".join("---" for _ in trees) + " |"]
    for kind in CLASSES:
        cells = []
        for tree in trees:
            picked = [a for a in results[tree] if a["class"] == kind]
            seconds = [a["judge_wall_s"] for a in picked]
            if seconds:
                files = ", ".join(f"{n} {k}" for k, n in Counter(a["file"].split("_")[0] for a in picked).items())
                mean = lambda p: statistics.mean(a.get("phases_s", {}).get(p, 0.0) for a in picked)  # noqa: E731
                phases = " / ".join(f"{mean(p):.1f}" for p in PHASES) + f"; {mean(WAIT):.1f}"
                cells.append(f"{len(seconds)} ({files}), {statistics.mean(seconds):.1f}, "
                              f"{statistics.median(seconds):.1f}, {phases}")
            else:
                cells.append("-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seed", help="the seed file the three files are made from (default: the task's first "
                        "seed for the device)")
    parser.add_argument("--budget", type=int, default=6, help="attempts of the run (the tuner takes turns over "
                        "the three files)")
    parser.add_argument("--seconds", type=int, help="instead of --budget: stop proposing after this many "
                        "seconds (the evaluations in flight still finish and count)")
    parser.add_argument("--src", action="append", default=[], help="a Ratchet source tree (the folder holding "
                        "ratchet/) to run with; repeat to compare trees (default: the one importable here)")
    parser.add_argument("--out", help="folder for the results as JSON and the table as Markdown")
    args = parser.parse_args()
    seed = Path(args.seed) if args.seed else default_seed(args.task, args.device)
    results = {}
    for src in args.src or [None]:
        with tempfile.TemporaryDirectory(prefix="judge_costs_") as tmp:
            folder = Path(tmp)
            results[src or "this tree"] = run_once(src, args, make_files(seed, folder), folder)
    text = table(results)
    limit = f"{args.seconds} s of proposals" if args.seconds else f"{args.budget} attempts"
    print(f"judge seconds per attempt: {args.task} on {args.device}, {limit}, seed {seed.name}")
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "judge_costs.json").write_text(json.dumps(results, indent=1))
        (out / "judge_costs.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
