"""What the L2 flush itself costs the timed call: memory-bound calls timed after each kind of flush.

The judge flushes the L2 before every timed call by writing a buffer twice its size (docs/design.md). Written
lines are dirty, and a call that starts with an L2 full of them pays for their write-back to DRAM inside
its own timed window. ``ratchet.judge.timing.L2Flusher`` therefore reads a second buffer after the write.
This measures, side by side in one process, the same calls after: the judge's flusher (written, then
read); the write alone (the judge before 2026-11-30); no flush (the previous call's outputs are then the
dirty lines). Each row is the median of ``--reps`` calls, each after the flush and a 200 µs hold so the
launch is queued before the start event, as in the judge. The copies give the ceiling at the same bytes.

    python -m benchmarks.probes.flush_cost --out out/flush_cost.md
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.flush_cost ...")

import torch

from benchmarks.common import command_line, record_results, refused
from ratchet.judge.timing import L2Flusher

ROWWISE = Path(__file__).resolve().parents[2] / "src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py"


def timed_median_us(fn, flush, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush()
        torch.cuda._sleep(200_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def emit_table(lines: list[str], out: Path | None) -> None:
    """Print a finished table, and write it to ``out`` too when given (its folder made)."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def calls() -> dict[str, tuple]:
    """name -> (function, bytes moved): a 268 MB rmsnorm (the task's largest H=4096 shape) and copies."""
    spec = importlib.util.spec_from_file_location("triton_rowwise", ROWWISE)
    triton_rowwise = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(triton_rowwise)

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    small_src = torch.empty(2**27, dtype=torch.uint8, device="cuda")
    small_dst = torch.empty_like(small_src)
    big_src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    big_dst = torch.empty_like(big_src)
    return {"rmsnorm T=16384 H=4096 bf16 (triton_rowwise)": (lambda: triton_rowwise.kernel(x, w, 1e-6), 4 * x.numel()),
            "copy 128 MiB": (lambda: small_dst.copy_(small_src), 2 * small_src.numel()),
            "copy 1 GiB": (lambda: big_dst.copy_(big_src), 2 * big_src.numel())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps wants 1 or more, got {args.reps}")
    if not torch.cuda.is_available():
        return refused("flush_cost", "needs a CUDA device")
    judge = L2Flusher(torch.device("cuda"))

    def written_only():
        judge.buffer.fill_(0x5A5A5A5A)

    flushes = {"judge (written, then read)": judge, "written only": written_only, "none": lambda: None}
    lines = [f"{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}, L2 "
             f"{torch.cuda.get_device_properties(0).L2_cache_size / 2**20:.0f} MiB, median of {args.reps}",
             "| call | flush | median µs | TB/s |", "|---|---|---|---|"]
    rows = []
    for name, (fn, nbytes) in calls().items():
        for label, flush in flushes.items():
            us = timed_median_us(fn, flush, args.reps)
            rows.append({"call": name, "flush": label, "median_us": us, "achieved_tbps": nbytes / us / 1e6,
                         "reps": args.reps})
            lines.append(f"| {name} | {label} | {us:.1f} | {nbytes / us / 1e6:.2f} |")
            print(lines[-1], flush=True)
    emit_table(lines, args.out)
    record_results("flush_cost", rows, device="cuda", command=command_line("benchmarks.probes.flush_cost", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
