"""Loop throughput: candidates judged per minute, and the share of wall time each GPU is busy.

Runs `ratchet run` (the tuner over a seed's SPACE, in a scratch ledger) for a fixed number of attempts
while a thread per GPU samples its utilization through NVML every 20 ms. ``--gpus 0,1`` runs the loop
with one worker per GPU (`ratchet run --gpus`), the same run as on one GPU but judged on both.

    python benchmarks/loop_throughput.py --task rmsnorm --budget 12 --out out/
    python benchmarks/loop_throughput.py --task rmsnorm --budget 12 --gpus 0,1 --out out/
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import torch
from rich.console import Console

from ratchet.cli.common import UsageError, parse_gpus
from ratchet.run.ledger import Ledger
from ratchet.run.run_command import RunRequest, start_or_resume


# Where Triton and torch's cpp_extension keep their builds; the judge's workers inherit the environment.
BUILD_CACHES = ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


@contextlib.contextmanager
def fresh_build_caches(root: Path):
    """Empty Triton and CUDA C++ build caches under ``root`` for the run, the environment restored after.
    Two runs in one call otherwise compare a cold first run with a warm second one: in session 8 a CUDA
    config's first call took 17-27 s on two GPUs (its nvcc build) and 0.5 s on one GPU right after."""
    saved = {name: os.environ.get(name) for name in BUILD_CACHES}
    try:
        for name in BUILD_CACHES:
            os.environ[name] = str(root / name.lower())
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class BusySampler(threading.Thread):
    """Mean of NVML's utilization.gpu over the run (the share of time a kernel was running)."""

    def __init__(self, index: int = 0, period_s: float = 0.02):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle, self.period = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index), period_s
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            time.sleep(self.period)


def phase_means(attempts: list[dict]) -> str:
    """Mean judge seconds per attempt and per phase (start, correctness, timing; from each verdict):
    where an attempt's time goes, and so how much of it the GPU can be busy for."""
    walls = [a["judge_wall_s"] for a in attempts if a.get("judge_wall_s")]
    phases: dict[str, list[float]] = {}
    for a in attempts:
        for name, seconds in ((a.get("extra") or {}).get("phases_s") or {}).items():
            phases.setdefault(name, []).append(seconds)
    parts = [f"judge {sum(walls) / len(walls):.1f} s"] if walls else []
    parts += [f"{name} {sum(v) / len(v):.1f} s" for name, v in phases.items()]
    return ", ".join(parts) or "-"


def timed_call_means(attempts: list[dict]) -> str:
    """Mean host microseconds per timed call and per part (the judge's timed_calls, weighted by calls):
    inside the timing phase, how much of a call is the kernel and how much is around it."""
    calls, sums = 0, {}
    for a in attempts:
        timed = (a.get("extra") or {}).get("timed_calls") or {}
        n = timed.get("calls") or 0
        calls += n
        for part, us in (timed.get("mean_us") or {}).items():
            sums[part] = sums.get(part, 0.0) + us * n
    if not calls:
        return "-"
    return f"{calls} timed calls, us per call: " + ", ".join(f"{part} {total / calls:.0f}" for part, total in sums.items())


def judge_host(attempts: list[dict], wall_s: float) -> str:
    """The judging threads' CPU seconds over the run's wall time; per attempt, the mean wait for the device
    lock and the correctness phase's parts (verdicts' judge_host_s). The loop judges in threads of one
    process, which share one interpreter lock: a CPU share near 100% means the judges queue for it, and
    more GPUs cannot go faster."""
    hosts = [(a.get("extra") or {}).get("judge_host_s") or {} for a in attempts]
    hosts = [h for h in hosts if h]
    if not hosts or wall_s <= 0:
        return "-"
    cpu = sum(h.get("cpu", 0.0) for h in hosts)

    def mean(key):
        return sum(h.get(key, 0.0) for h in hosts) / len(hosts)

    return (f"judge threads' CPU {cpu:.1f} s = {100 * cpu / wall_s:.0f}% of one core over the run; per attempt "
            f"waiting for the GPU {mean('gpu_wait'):.1f} s, correctness: first call {mean('first_call'):.1f} s "
            f"(its launch, compile included, {mean('first_launch'):.1f} s by the worker's clock, or "
            f"{mean('first_profiled'):.1f} s where it ran under the profiler), other calls {mean('calls'):.1f} s, "
            f"checks {mean('checks'):.1f} s")


def timed_kernel_seconds(attempts: list[dict]) -> float:
    """GPU seconds of the timed kernels themselves (the candidates' and the references'), over the run."""
    total = 0.0
    for a in attempts:
        timed = (a.get("extra") or {}).get("timed_calls") or {}
        total += (timed.get("calls") or 0) * ((timed.get("mean_us") or {}).get("kernel") or 0.0) / 1e6
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--gpus", metavar="LIST",
                        help="GPU indices to judge on in parallel, e.g. 0,1 (default: GPU 0 alone)")
    parser.add_argument("--warm-caches", action="store_true",
                        help="use this machine's Triton and CUDA C++ build caches (default: empty ones for the run, "
                             "so builds are counted the same in every run)")
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.gpus and device != "cuda":
        parser.error("--gpus needs CUDA GPUs, and this machine has none")
    try:
        args.gpus = tuple(parse_gpus(args.gpus, device) or ())  # the checks of `ratchet run --gpus`
    except UsageError as exc:
        parser.error(str(exc))
    samplers = [BusySampler(i) for i in (args.gpus or (0,))] if device == "cuda" else []
    for sampler in samplers:
        sampler.start()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, Ledger(Path(tmp) / "ledger.sqlite") as ledger, \
            (contextlib.nullcontext() if args.warm_caches else fresh_build_caches(Path(tmp))):
        start_or_resume(ledger, RunRequest(task=args.task, budget=args.budget, device=device, gpus=args.gpus),
                        Console(stderr=True))
        attempts = ledger.list_runs()[0]["attempts"]
        recorded = ledger.attempts(ledger.list_runs()[0]["id"])
        phases, calls = phase_means(recorded), timed_call_means(recorded)
        kernel_s = timed_kernel_seconds(recorded)
        wall = time.perf_counter() - t0
        host = judge_host(recorded, wall)
        # Each attempt's phases and correctness parts, for what a mean hides (which attempts are slow).
        per_attempt = [{"number": i + 1, "config": a.get("config"), "judge_wall_s": a.get("judge_wall_s"),
                        "phases_s": (a.get("extra") or {}).get("phases_s"),
                        "judge_host_s": (a.get("extra") or {}).get("judge_host_s")} for i, a in enumerate(recorded)]
    busy = []
    for sampler in samplers:
        sampler.stop.set()
        sampler.join()
        busy.append(f"{sum(sampler.samples) / max(1, len(sampler.samples)):.0f}%")
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    gpus = f" on GPUs {','.join(map(str, args.gpus))}" if args.gpus else ""
    text = (f"{name}, {time.strftime('%Y-%m-%d')}, {args.task}{gpus}: {attempts} attempts in {wall:.0f} s = "
            f"{60 * attempts / wall:.1f} candidates/min; GPU busy {' / '.join(busy) or '-'} "
            f"(NVML: any kernel running, the launch holds included), timed kernels {100 * kernel_s / wall:.2f}% "
            "of the wall; "
            f"mean per attempt: {phases}; {host}; {calls}; build caches "
            f"{'of this machine' if args.warm_caches else 'empty at the start'}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "loop_throughput.txt").write_text(text + "\n")
    (Path(args.out) / "attempts.json").write_text(json.dumps(per_attempt, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
