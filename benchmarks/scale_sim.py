"""Scale simulation: candidates per hour of one run on 1 to 512 GPUs, and where its driver saturates.

A discrete-event simulation of ``ratchet run`` as it runs on a cluster (``--executor ray``): per GPU,
1 + LOOKAHEAD evaluations at once, each a start (workers, import, compile: the node's CPU cores), a
correctness phase (the GPU shared with the other evaluations' checks) and a timing phase (the GPU alone,
a waiting timer going first; judge/device_lock.py takes turns per batch of checks and per timed shape,
which this coarsens to whole phases); one driver that does, one at a time, each
proposal (the proposer and the race bars sent with it) and each commit (keep rule, ledger, the
proposer told), commits in proposal order, at most UNCOMMITTED_PIPELINES pipelines judged and waiting.

Inputs, all recorded: the judge's phase times (mean seconds per attempt measured on an H200, named in
PROFILES with their date and command) and the driver's seconds per candidate, by how many attempts the
run has, measured on this project's CPU machine by ``benchmarks.probes.driver_cost`` (``--driver``: its
JSON). Each phase of each evaluation is drawn from a lognormal around its recorded mean (``--spread``),
since the recorded figures are means.

    python -m benchmarks.scale_sim --driver docs/results/2026-12-02-driver-cost.json --gpus 1,2,8,64,512
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m benchmarks.scale_sim ...")

from benchmarks.common import command_line, record_results
from ratchet.run.executor import LOOKAHEAD
from ratchet.run.loop import UNCOMMITTED_PIPELINES


@dataclass(frozen=True)
class Phases:
    """Mean seconds of one evaluation's phases, as recorded."""

    start_s: float
    correctness_s: float
    timing_s: float
    source: str


PROFILES = {
    # docs/NOTES.md and docs/benchmarks.md, H200, 2026-11-30 (wgmma MLA tiles): mean per attempt of
    # `python -m benchmarks.probes.loop_throughput --task benchmarks/tasks/rmsnorm_decode.py --budget 8`
    "rmsnorm_decode": Phases(3.6, 12.0, 4.2, "H200, 2026-11-30, loop_throughput rmsnorm_decode, mean of 8 attempts"),
    # docs/NOTES.md, H200, 2026-12-01: `python -m ratchet eval rmsnorm src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py
    # --json`, one evaluation of the full rmsnorm task (12 shapes), the box off
    "rmsnorm": Phases(7.5, 41.3, 54.8, "H200, 2026-12-01, ratchet eval rmsnorm triton_rowwise, one evaluation"),
}


class DriverCost:
    """The driver's seconds per candidate (propose + dispatch, and commit) by attempts recorded so far,
    from driver_cost's windows; beyond the last window, extended along its last two (the tuner's cost
    grows with its trials)."""

    def __init__(self, rows: list[dict]):
        self.rows = [r for r in rows if "commit_s" in r]

    def _at(self, n: int, key: str) -> float:
        rows = self.rows
        mids = [(r["attempts_from"] + r["attempts_to"]) / 2 for r in rows]
        values = [sum(r.get(k, 0.0) for k in key.split("+")) for r in rows]
        if n <= mids[0] or len(rows) == 1:
            return values[0]
        for i in range(1, len(rows)):
            if n <= mids[i]:
                w = (n - mids[i - 1]) / (mids[i] - mids[i - 1])
                return values[i - 1] + w * (values[i] - values[i - 1])
        slope = (values[-1] - values[-2]) / (mids[-1] - mids[-2])
        return max(values[-1], values[-1] + slope * (n - mids[-1]))

    def propose_s(self, n: int) -> float:
        return self._at(n, "propose_s+dispatch_s")

    def commit_s(self, n: int) -> float:
        return self._at(n, "commit_s")


def simulate(gpus: int, phases: Phases, driver: DriverCost, attempts: int, spread: float = 0.3,
             seed: int = 0) -> dict:
    """One run of ``attempts`` candidates on ``gpus`` GPUs; returns its wall time, throughput and where
    the time went."""
    rng = random.Random(seed)
    per_gpu = 1 + LOOKAHEAD
    pipeline = gpus * per_gpu
    uncommitted_cap = UNCOMMITTED_PIPELINES * pipeline

    def draw(mean: float) -> float:
        sigma = spread
        return mean * math.exp(rng.gauss(-sigma * sigma / 2, sigma))  # lognormal with this mean

    now = 0.0
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, evaluation)
    order = 0

    def at(time: float, kind: str, ev: int):
        nonlocal order
        order += 1
        heapq.heappush(events, (time, order, kind, ev))

    gpu_of: dict[int, int] = {}
    running = [0] * gpus  # evaluations in flight per GPU
    shared = [0] * gpus  # checks on the GPU now
    timing = [False] * gpus
    timers_waiting: list[list[int]] = [[] for _ in range(gpus)]
    checks_waiting: list[list[int]] = [[] for _ in range(gpus)]
    judged: set[int] = set()
    proposed = committed = 0
    next_commit = 0  # evaluations commit in proposal order
    driver_free_at = 0.0
    driver_busy = 0.0
    commit_times: list[float] = []
    gpu_timing_s = 0.0

    def gpu_step(g: int):
        """Start what the GPU's lock lets start: a waiting timer once no check runs, else the waiting checks."""
        nonlocal gpu_timing_s
        if timing[g]:
            return
        if timers_waiting[g]:
            if shared[g] == 0:
                ev = timers_waiting[g].pop(0)
                timing[g] = True
                t = draw(phases.timing_s)
                gpu_timing_s += t
                at(now + t, "timed", ev)
            return
        while checks_waiting[g]:
            ev = checks_waiting[g].pop(0)
            shared[g] += 1
            at(now + draw(phases.correctness_s), "checked", ev)

    def driver_work():
        """The driver, one thing at a time: the next commit when it is judged, else the next proposal."""
        nonlocal driver_free_at, driver_busy, proposed, committed, next_commit
        if driver_free_at > now:
            return
        if next_commit in judged:
            cost = driver.commit_s(committed)
            judged.discard(next_commit)
            gpu_of.pop(next_commit)
            next_commit += 1
            committed += 1
            commit_times.append(now)
            driver_free_at = now + cost
            driver_busy += cost
            at(driver_free_at, "driver", -1)
            return
        in_flight = sum(running)
        if proposed < attempts and in_flight < pipeline and proposed - committed < uncommitted_cap:
            cost = driver.propose_s(committed)
            ev = proposed
            proposed += 1
            g = min(range(gpus), key=lambda i: running[i])
            running[g] += 1
            gpu_of[ev] = g
            driver_free_at = now + cost
            driver_busy += cost
            at(driver_free_at + draw(phases.start_s), "started", ev)
            at(driver_free_at, "driver", -1)

    at(0.0, "driver", -1)
    while committed < attempts and events:
        now, _, kind, ev = heapq.heappop(events)
        if kind == "started":
            checks_waiting[gpu_of[ev]].append(ev)
            gpu_step(gpu_of[ev])
        elif kind == "checked":
            g = gpu_of[ev]
            shared[g] -= 1
            timers_waiting[g].append(ev)
            gpu_step(g)
        elif kind == "timed":
            g = gpu_of[ev]
            timing[g] = False
            running[g] -= 1  # judged: its slot is free (the loop counts evaluations not done), commit or not
            judged.add(ev)
            gpu_step(g)
        driver_work()
    # The steady rate: commits between the run's 20th and 80th percent, leaving out the pipelines filling
    # at the start and draining at the end (the longest of N drains grows with N in a short run).
    lo, hi = int(0.2 * committed), int(0.8 * committed) - 1
    rate = (hi - lo) / max(1e-9, commit_times[hi] - commit_times[lo]) * 3600
    return {"gpus": gpus, "attempts": committed, "wall_s": round(now, 1),
            "candidates_per_hour": round(rate, 1), "per_gpu_per_hour": round(rate / gpus, 2),
            "driver_busy_share": round(driver_busy / now, 3),
            "gpu_timing_share": round(gpu_timing_s / (now * gpus), 3)}


def _mean(runs: list[dict]) -> dict:
    out = dict(runs[0])
    for key in ("wall_s", "candidates_per_hour", "per_gpu_per_hour", "driver_busy_share", "gpu_timing_share"):
        out[key] = round(sum(r[key] for r in runs) / len(runs), 3)
    out["runs"] = len(runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", type=Path, required=True, help="driver_cost's JSON (benchmarks.probes.driver_cost --out)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="rmsnorm_decode")
    parser.add_argument("--gpus", default="1,2,8,64,512", help="GPU counts to simulate")
    parser.add_argument("--per-gpu", type=int, default=30, help="candidates in the run per GPU (a run long "
                        "enough that its steady rate can be read)")
    parser.add_argument("--min-attempts", type=int, default=600, help="candidates in the run at least (a steady "
                        "rate for few GPUs)")
    parser.add_argument("--spread", type=float, default=0.3, help="lognormal sigma of each phase around its mean")
    parser.add_argument("--seeds", type=int, default=5, help="runs per GPU count, each with its own draws; the "
                        "figures are their means")
    args = parser.parse_args(argv)
    recorded = json.loads(args.driver.read_text())
    driver = DriverCost(recorded["rows"])
    phases = PROFILES[args.profile]
    counts = [int(g) for g in args.gpus.split(",") if g.strip()]
    measured = max(r["attempts_to"] for r in driver.rows)
    rows = [_mean([simulate(g, phases, driver, max(args.min_attempts, args.per_gpu * g), args.spread, seed) for seed in range(args.seeds)])
            for g in counts]
    one = next((r for r in rows if r["gpus"] == 1), None)
    print(f"profile {args.profile}: start {phases.start_s} s, correctness {phases.correctness_s} s, timing "
          f"{phases.timing_s} s ({phases.source}); driver costs from: {recorded.get('command', args.driver)}\n")
    print("| GPUs | attempts | candidates/hour | per GPU | of linear | driver busy | GPUs timing | driver costs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        linear = r["candidates_per_hour"] / (one["candidates_per_hour"] * r["gpus"]) if one else float("nan")
        r["of_linear"] = round(linear, 3)
        r["profile"] = args.profile
        r["driver_extended"] = r["attempts"] > measured
        costs = f"extended past {measured}" if r["driver_extended"] else "measured"
        print(f"| {r['gpus']} | {r['attempts']} | {r['candidates_per_hour']:.0f} | {r['per_gpu_per_hour']:.1f} | "
              f"{100 * linear:.0f}% | {100 * r['driver_busy_share']:.0f}% | {100 * r['gpu_timing_share']:.0f}% | {costs} |")
    record_results("scale_sim", rows, device="cpu", command=command_line("benchmarks.scale_sim", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
