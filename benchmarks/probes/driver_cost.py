"""Driver cost: how many candidates a second can the loop's driver handle when judging costs nothing?

The driver of a run (``ratchet run``, on one machine or over a Ray cluster) proposes, commits each
verdict (the keep rule, the ledger write), tells the proposer, reads the race bars and builds
composites; only the evaluations leave it. This probe runs the real ``Loop`` with a stand-in executor
whose evaluations return at once (a verdict fabricated from recorded shapes: 80% fail, as the field's
runs do, the rest pass with a random speed), so the loop's own work is all that is timed. It reports
seconds per candidate spent proposing and committing, by windows of the attempts already recorded
(the tuner and the ledger reads grow with them).

    python -m benchmarks.probes.driver_cost --attempts 1500 --out out/driver_cost.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m benchmarks.probes.driver_cost ...")

from benchmarks.common import command_line, record_results

# Candidates as a long run has them: many files (an LLM proposer writes one per idea) with a SPACE of
# 32 configs each, like the built-in seeds' (the largest real SPACE has 42), so that the run does not
# run out of configs; and the axpby test task.
CANDIDATE = '''"""Stand-in candidate {index} for the driver-cost probe."""

SPACE = {{"BLOCK": [64, 128, 256, 512], "WARPS": [1, 2, 4, 8], "STAGES": [1, 2]}}


def kernel(x, y, a, BLOCK=64, WARPS=1, STAGES=1):
    return a * x + y
'''
TASK = Path(__file__).resolve().parents[2] / "tests" / "data" / "tasks" / "axpby.py"
SHAPES = ({"N": 1000}, {"N": 4096}, {"N": 65536}, {"N": 1048576})  # four public shapes, like rmsnorm's per dtype
TIMES = 32  # timed batches per shape and side, as a GPU verdict keeps


def fabricated_verdict(rng: random.Random) -> dict:
    if rng.random() < 0.8:
        return {"verdict": "fail", "reasons": [{"code": "wrong_output", "detail": "stand-in"}], "speedup": None,
                "shapes": [], "judge_wall_s": 0.0, "device": "cuda", "device_name": "stand-in GPU"}
    scale = rng.uniform(0.6, 1.4)
    shapes = [{"shape": dict(s), "dtype": "bfloat16", "held_out": False, "weight": 1.0, "mode": "eager",
               "median_us": 10.0 * scale, "speedup": 1 / scale,
               "times_us": [10.0 * scale * rng.uniform(0.98, 1.02) for _ in range(TIMES)],
               "ref_times_us": [10.0 * rng.uniform(0.98, 1.02) for _ in range(TIMES)]} for s in SHAPES]
    return {"verdict": "pass", "reasons": [], "speedup": 1 / scale, "shapes": shapes, "judge_wall_s": 0.0,
            "device": "cuda", "device_name": "stand-in GPU"}


class FreeExecutor:
    """Evaluations that cost nothing: the loop's driver is all that runs."""

    name = "free"

    def __init__(self, pipeline: int, seed: int = 0):
        self.slots, self.pipeline = list(range(pipeline)), pipeline
        self.rng = random.Random(seed)

    def judge(self, task, candidate, config, slot, race_bars):
        return fabricated_verdict(self.rng)

    def close(self):
        pass


def measure(attempts: int, pipeline: int, window: int, sampler: str = "tpe", files: int = 60) -> list[dict]:
    from ratchet.candidate import load_candidate
    from ratchet.judge import JudgeOptions
    from ratchet.run.ledger import Ledger
    from ratchet.run.loop import Loop, RunLimits
    from ratchet.search.tune import TuneProposer
    from ratchet.task import load_task

    task = load_task(str(TASK))
    with tempfile.TemporaryDirectory(prefix="ratchet-driver-") as tmp:
        candidates = []
        for index in range(files):
            path = Path(tmp) / f"candidate_{index}.py"
            path.write_text(CANDIDATE.format(index=index))
            candidates.append(load_candidate(str(path)))
        ledger = Ledger(Path(tmp) / "ledger.sqlite")
        run = ledger.create_run(task=task.name, task_path=str(TASK), device="cuda", device_name="stand-in GPU",
                                proposer="tune", budget_attempts=attempts)
        proposer = TuneProposer(candidates, sampler=sampler)
        spent = {"propose": [], "dispatch": [], "commit": []}
        loop = Loop(ledger, run, task, proposer, RunLimits(budget_attempts=attempts),
                    [JudgeOptions(device="cuda")], candidates=candidates, counters="off",
                    executor=FreeExecutor(pipeline))
        # propose: the proposer (and its duplicate check); dispatch: the race bars an evaluation takes
        # along (in the loop's threads); commit: keep rule, ledger write, tell, composites.
        for name, method in (("propose", "_next_proposal"), ("dispatch", "_judge"), ("commit", "_commit")):
            original = getattr(loop, method)

            def timed(*args, _original=original, _name=name):
                started = time.perf_counter()
                try:
                    return _original(*args)
                finally:
                    spent[_name].append(time.perf_counter() - started)

            setattr(loop, method, timed)
        started = time.perf_counter()
        loop.run()
        wall = time.perf_counter() - started
        ledger.close()
    rows = []
    commits = spent["commit"]
    for start in range(0, len(commits), window):
        chunk = commits[start:start + window]
        row = {"attempts_from": start, "attempts_to": start + len(chunk)}
        for name, times in spent.items():
            part = times[start:start + window]
            row[f"{name}_s"] = sum(part) / max(1, len(part))
        rows.append(row)
    rows.append({"attempts_from": 0, "attempts_to": len(commits), "wall_s_total": wall,
                 "candidates_per_s_total": len(commits) / wall})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probes.driver_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=1500)
    parser.add_argument("--pipeline", type=int, default=64, help="evaluations in flight (the loop's threads)")
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--sampler", choices=["tpe", "random"], default="tpe")
    parser.add_argument("--files", type=int, default=60, help="candidate files (32 configs each)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here (what benchmarks.scale_sim reads)")
    args = parser.parse_args(argv)
    if args.attempts > 32 * args.files:
        parser.error(f"--attempts {args.attempts} is more than {args.files} files of 32 configs hold")
    rows = measure(args.attempts, args.pipeline, args.window, args.sampler, args.files)
    for row in rows[:-1]:
        print(f"attempts {row['attempts_from']:5d}-{row['attempts_to']:5d}: propose {1e3 * row['propose_s']:7.2f} ms, "
              f"dispatch {1e3 * row['dispatch_s']:6.2f} ms, commit {1e3 * row['commit_s']:7.2f} ms per candidate")
    print(f"total: {rows[-1]['attempts_to']} candidates in {rows[-1]['wall_s_total']:.1f} s "
          f"({rows[-1]['candidates_per_s_total']:.1f}/s)")
    command = command_line("benchmarks.probes.driver_cost", argv)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": command, "date": time.strftime("%Y-%m-%d"), "sampler": args.sampler,
                                        "files": args.files, "rows": rows}, indent=1))
    record_results("driver_cost", rows, device="cpu", command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
