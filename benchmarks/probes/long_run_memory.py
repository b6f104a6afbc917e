"""Long run: N attempts in one run, with the judge's process memory, the GPU's memory and the judge's
seconds per attempt sampled after each attempt. Memory that grows with attempts (a leak in the judge, a
worker's GPU memory not given back) or a judge that slows down shows here, not in a 12-attempt run.

The run is the real loop (ratchet.run.loop.Loop: judge threads, keep rule, ledger) on a task's seeds, with a
proposer that cycles through every config of every seed until N attempts are judged (a tuner would stop
when its space is exhausted). After each committed attempt it samples the RSS of this process (the loop
and its judges) and, on CUDA, the device's used memory (total minus free, all processes); at the end, the
processes left under this one (keepers, workers: there must be none).

    python -m benchmarks.probes.long_run_memory --task rmsnorm --attempts 200 --out out/
    python -m benchmarks.probes.long_run_memory --task benchmarks/tasks/rmsnorm_decode.py --no-timing --seconds 240
    python -m benchmarks.probes.long_run_memory --task tests/data/tasks/axpby.py --seeds tests/data/candidates/axpby_honest.py \
        --device cpu --attempts 5
    # one run over two device calls: the second resumes the run in the ledger the first left
    python -m benchmarks.probes.long_run_memory --task T --attempts 200 --seconds 480 --ledger out/long.sqlite
    python -m benchmarks.probes.long_run_memory --task T --attempts 200 --seconds 480 --ledger out/long.sqlite --resume

The GPU's used memory counts every process on it, and each live worker holds a CUDA context (about
0.9 GiB on the H200), so a sample taken during the run says how many evaluations were in flight at that
moment more than anything else (it is shown, with its maximum, but not bounded). GPU growth is the used
memory at rest: after the run, once its processes are gone and this process's allocator has returned its
cached blocks (``torch.cuda.empty_cache``), against before its first attempt, with this process's own CUDA
context open both times. The judge's own live CUDA tensors (``torch.cuda.memory_allocated``, this process)
are sampled after every attempt and bounded like the host's RSS: a leak of the judge's would show there.
With --resume the attempts already in the ledger count toward --attempts, and the table covers this
process's attempts (a fresh judge process: its memory starts anew).

Exit status 1 when host or GPU memory grew by more than --max-growth-mib between the first and the last
quarter of the attempts (medians), when the judge's seconds per attempt grew by more than --max-slowdown
(the same quarters; only from 20 attempts on, below that one slow attempt is noise), or when a process of
the run outlived it. 2 for bad usage.
"""

from __future__ import annotations

import argparse
from collections import Counter
import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions
from ratchet.judge.forkserver import ForkServer
from ratchet.run.executor import LOOKAHEAD, LocalExecutor
from ratchet.run.ledger import Ledger, LedgerError
from ratchet.run.loop import Loop, LoopEvent, RunLimits, load_seeds
from ratchet.search.base import Outcome, Proposal
from ratchet.task import TaskError, load_task

MIB = 2**20


class CyclingProposer:
    """Every config of every seed in turn, round and round, each attempt a file of its own: a copy of the
    seed with the attempt's number in a comment (the loop judges a file and config once, as an LLM's new
    files would be), so a run is as long as asked, on honest candidates."""

    name = "cycle"

    def __init__(self, candidates, folder: Path, start: int = 0):
        self._turns = itertools.cycle([(c, cfg) for c in candidates for cfg in c.all_configs()])
        # A resumed run starts numbering after the attempts already judged, so no file repeats one of them.
        self.folder, self.count = folder, start

    def propose(self) -> Proposal | None:
        seed, config = next(self._turns)
        self.count += 1
        copy = self.folder / f"{Path(seed.path).stem}_attempt{self.count}.py"
        copy.write_text(seed.source + f"\n# long run attempt {self.count}\n")
        return Proposal(load_candidate(copy), config, proposer=self.name)

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        pass


@dataclass(frozen=True)
class Sample:
    attempt: int
    host_rss_mib: float
    gpu_used_mib: float | None
    judge_cuda_tensors_mib: float | None
    judge_s: float
    verdict: str


class Sampler:
    def __init__(self, device: str):
        self.device, self.samples, self.me = device, [], psutil.Process()

    def __call__(self, event: LoopEvent):
        gpu = tensors = None
        if self.device == "cuda":
            gpu, tensors = gpu_used_mib(), torch.cuda.memory_allocated() / MIB
        self.samples.append(Sample(event.attempts, self.me.memory_info().rss / MIB, gpu, tensors, event.judge_wall_s,
                                   event.verdict))


def gpu_used_mib() -> float:
    """The device's used memory, all processes (total minus free); opens this process's CUDA context."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / MIB


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # ended between the listing and the question
        return False


def slope(ys: list[float]) -> float:
    """Least-squares change per attempt."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def quarters(ys: list[float]) -> tuple[float, float]:
    """Medians of the first and the last quarter of ``ys`` (at least one value each)."""
    q = max(1, len(ys) // 4)
    return statistics.median(ys[:q]), statistics.median(ys[-q:])


def table(samples: list[Sample], gpu_at_rest: tuple[float, float] | None = None) -> list[dict]:
    """One row per metric. Host RSS and the judge's seconds grow by their quarters' medians; the GPU's
    memory during the run is shown unbounded (growth None: it follows the evaluations in flight), and at
    rest, given as (before, after), grows by the difference."""
    rows = []
    for name, unit, values in (("host RSS of the judge", "MiB", [s.host_rss_mib for s in samples]),
                               ("GPU memory used in flight", "MiB", [s.gpu_used_mib for s in samples]),
                               ("the judge's live CUDA tensors", "MiB", [s.judge_cuda_tensors_mib for s in samples]),
                               ("judge seconds per attempt", "s", [s.judge_s for s in samples])):
        if not values or values[0] is None:
            continue
        early, late = quarters(values)
        in_flight = name.endswith("in flight")
        rows.append({"metric": name, "unit": unit, "first": values[0], "last": values[-1], "max": max(values),
                     "slope_per_attempt": slope(values), "first_quarter": early, "last_quarter": late,
                     "growth": None if in_flight else late - early})
    if gpu_at_rest is not None:
        before, after = gpu_at_rest
        rows.insert(1, {"metric": "GPU memory used at rest", "unit": "MiB", "first": before, "last": after,
                        "max": max(before, after), "slope_per_attempt": None, "first_quarter": before,
                        "last_quarter": after, "growth": after - before})
    return rows


def verdicts_of(samples: list[Sample]) -> dict:
    counts = {}
    for s in samples:
        counts[s.verdict] = counts.get(s.verdict, 0) + 1
    return counts


def problems(rows: list[dict], attempts: int, max_growth_mib: float, max_slowdown: float, left: int) -> list[str]:
    found = []
    for row in rows:
        if row["unit"] == "MiB" and row["growth"] is not None and row["growth"] > max_growth_mib:
            found.append(f"{row['metric']} grew {row['growth']:.0f} MiB (bound {max_growth_mib:.0f} MiB)")
        early, late = row["first_quarter"], row["last_quarter"]
        if row["unit"] == "s" and attempts >= 20 and early > 0 and late / early > max_slowdown:
            found.append(f"the judge slowed from {early:.1f} to {late:.1f} s per attempt (bound {max_slowdown:.2f}x)")
    if left:
        found.append(f"{left} process(es) of the run outlived it")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--seeds", nargs="*", default=None, help="candidate files (default: the task's seeds)")
    parser.add_argument("--attempts", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=None,
                        help="also stop after this much wall time (a device call's limit); the table covers what ran")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-timing", action="store_true", help="correctness only (each attempt much shorter)")
    parser.add_argument("--max-growth-mib", type=float, default=256.0)
    parser.add_argument("--max-slowdown", type=float, default=1.5)
    parser.add_argument("--out", default=None, help="folder for long_run_memory.json")
    parser.add_argument("--ledger", default=None,
                        help="keep the run in this ledger file (default: a temporary one, gone after)")
    parser.add_argument("--lookahead", type=int, default=LOOKAHEAD,
                        help=f"evaluations in flight on the GPU beyond the one timed (the loop's default: {LOOKAHEAD})")
    parser.add_argument("--resume", action="store_true",
                        help="go on with the one run in --ledger (one run over several device calls)")
    args = parser.parse_args(argv)
    if args.attempts < 1:
        parser.error("--attempts must be at least 1")
    if args.seconds is not None and args.seconds <= 0:
        parser.error("--seconds must be positive")
    if args.lookahead < 0:
        parser.error("--lookahead must be 0 or more")
    if args.resume and not (args.ledger and Path(args.ledger).is_file()):
        parser.error("--resume needs --ledger naming the file an earlier call left")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA GPU, and this machine has none")
    try:
        task = load_task(args.task)
        candidates = load_seeds(task, args.seeds, args.device)
    except (TaskError, OSError, ValueError) as exc:
        print(f"long_run_memory: {exc}", file=sys.stderr)
        return 2
    if not candidates:
        print(f"long_run_memory: task {task.name} has no seeds for {args.device}", file=sys.stderr)
        return 2
    try:
        return _long_run(args, task, candidates)
    except LedgerError as exc:  # a --ledger that is no ledger, read-only, or on a full disk
        print(f"long_run_memory: {exc}", file=sys.stderr)
        return 2


def _long_run(args, task, candidates) -> int:
    sampler = Sampler(args.device)
    gpu_before = gpu_used_mib() if args.device == "cuda" else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, Ledger(Path(args.ledger or Path(tmp) / "ledger.sqlite")) as ledger:
        if args.resume:
            runs = ledger.list_runs()
            if len(runs) != 1:
                print(f"long_run_memory: {args.ledger} holds {len(runs)} runs, not the one to resume", file=sys.stderr)
                return 2
            run_id = runs[0]["id"]
        else:
            run_id = ledger.create_run(task=task.name, task_path=args.task, device=args.device,
                                       device_name=args.device, proposer=CyclingProposer.name,
                                       budget_attempts=args.attempts)
        before = ledger.count_attempts(run_id)
        options = [JudgeOptions(device=args.device, time_it=not args.no_timing)]
        copies = Path(tmp) / "attempts"
        copies.mkdir()
        limits = RunLimits(budget_attempts=args.attempts, budget_seconds=args.seconds)
        loop = Loop(ledger, run_id, task, CyclingProposer(candidates, copies, start=before), limits,
                    options, on_event=sampler, candidates=candidates, counters="off",
                    executor=LocalExecutor(options, lookahead=args.lookahead))
        result = loop.run()
        in_run = ledger.count_attempts(run_id)
        verdicts_in_run = dict(Counter(attempt["verdict"] for attempt in ledger.attempts(run_id)))
    wall = time.perf_counter() - started
    time.sleep(1)  # keepers end within their grace
    servers = ForkServer.pids()  # they wait for this process's next worker; what they forked is counted
    left = [p for p in psutil.Process().children(recursive=True) if _alive(p) and p.pid not in servers]
    gpu_after = cached = None
    if gpu_before is not None:
        # The judge's checks leave blocks in this process's caching allocator (more with more evaluations in
        # flight); they are reused, not leaked, so they are returned before the reading at rest.
        cached = (torch.cuda.memory_reserved() - torch.cuda.memory_allocated()) / MIB
        torch.cuda.empty_cache()
        gpu_after = gpu_used_mib()
    rows = table(sampler.samples, (gpu_before, gpu_after) if gpu_before is not None else None)
    found = problems(rows, len(sampler.samples), args.max_growth_mib, args.max_slowdown, len(left))
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"{device}, {time.strftime('%Y-%m-%d')}, {task.name}: {len(sampler.samples)} attempts in {wall:.0f} s "
          f"({result.stop_reason}, lookahead {args.lookahead}); verdicts {verdicts_of(sampler.samples)}")
    if before:
        print(f"the run now holds {in_run} attempts ({before} from earlier calls); verdicts {verdicts_in_run}")
    print(f"{'metric':<32} {'first':>9} {'last':>9} {'max':>9} {'slope/attempt':>14} {'growth':>9}")
    for row in rows:
        slope_text = "" if row["slope_per_attempt"] is None else f"{row['slope_per_attempt']:.3f}"
        growth_text = "" if row["growth"] is None else f"{row['growth']:.1f}"
        print(f"{row['metric'] + ' (' + row['unit'] + ')':<32} {row['first']:>9.1f} {row['last']:>9.1f} "
              f"{row['max']:>9.1f} {slope_text:>14} {growth_text:>9}")
    print(f"processes left after the run: {len(left)}")
    print("; ".join(found) if found else f"flat: growth within {args.max_growth_mib:.0f} MiB, no slowdown")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "long_run_memory.json").write_text(json.dumps(
            {"attempts": len(sampler.samples), "attempts_in_run": in_run, "attempts_before": before,
             "verdicts_in_run": verdicts_in_run, "wall_s": wall, "rows": rows, "problems": found,
             "allocator_cache_returned_mib": cached,
             "samples": [s.__dict__ for s in sampler.samples]}, indent=1) + "\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
