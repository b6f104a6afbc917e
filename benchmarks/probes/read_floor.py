"""How fast anything can be judged for a memory-bound shape: a bare read of its bytes under the judge's protocol.

A roofline divides a shape's bytes by the copy ceiling. A judged time also carries the protocol: the L2 is
flushed before the call (``ratchet.judge.timing.L2Flusher``), the call is replayed from a CUDA graph after
a hold, and the first bytes come from DRAM. This measures, in one process, the fastest kernels we know that
only read the same number of bytes, timed that way (median of ``--reps`` graph replays, each after the
judge's flush and a 200 µs hold, as ``flush_cost.py`` times): one-thread bulk copies into shared memory
(``cp.async.bulk``) over grids of 1-4 blocks an SM, several chunks in flight, and 16-byte loads a thread.
The best of them is a floor for any kernel that must read those bytes: no kernel that also computes and
writes can be judged faster. A one-element fill gives the protocol's own floor (a replay of nothing).

Sizes come from a task's cost model (every public GPU shape, or those that match ``--where``) or from
``--mb``:

    python -m benchmarks.probes.read_floor --task decode_attention --where B=1 Hq=32 --out out/read_floor.md
    python -m benchmarks.probes.read_floor --mb 16.8 134.2

On the H200 (2026-12-01, the first command above; docs/results/2026-12-01-read-floor.md): the B = 1 caches of
decode attention at L = 4096 / 32768 / 131072 (16.8 / 134.2 / 536.9 MB) read in 8.29 / 33.38 / 119.02 µs at
best; the fill took 3.14. The probe this script came from tried 17 ways and read the first two in 8.13 and
32.90 at best (docs/benchmarks.md, "2026-12-01 (decode read floor)").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.read_floor ...")

import torch
from benchmarks.probes.flush_cost import emit_table, timed_median_us
from benchmarks.common import command_line, parse_where, record_results, refused, subset_task

from ratchet.cuda_build import load_cached
from ratchet.judge.timing import L2Flusher
from ratchet.task import TaskError, load_task

CUDA_SRC = r"""
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread a block: `stages` bulk copies of `chunk` bytes in flight into shared memory, each refilled as
// soon as it lands; a block reads one contiguous share of the buffer. Only the copy engine's reads count.
__global__ void bulk_read(const char* __restrict__ src, long long bytes, int chunk, int stages, float* out) {
  extern __shared__ __align__(128) char ring[];
  __shared__ __align__(8) uint64_t landed[16];
  const long long chunks = (bytes + chunk - 1) / chunk;
  const long long per = (chunks + gridDim.x - 1) / gridDim.x;
  const long long first = blockIdx.x * per, last = min(chunks, first + per);
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_addr(&landed[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  long long next = first;
  auto issue = [&](int s) {
    const uint32_t size = static_cast<uint32_t>(min(static_cast<long long>(chunk), bytes - next * chunk));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(&landed[s])), "r"(size)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(shared_addr(ring + static_cast<size_t>(s) * chunk)), "l"(src + next * chunk), "r"(size),
                 "r"(shared_addr(&landed[s])) : "memory");
    ++next;
  };
  for (int s = 0; s < stages && next < last; ++s) issue(s);
  float acc = 0.0f;
  for (long long c = first; c < last; ++c) {
    const int s = static_cast<int>((c - first) % stages);
    const uint32_t parity = static_cast<uint32_t>(((c - first) / stages) & 1);
    uint32_t done = 0;
    while (!done) {
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(shared_addr(&landed[s])), "r"(parity) : "memory");
    }
    acc += *reinterpret_cast<const float*>(ring + static_cast<size_t>(s) * chunk);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the read above before the refill
    if (next < last) issue(s);
  }
  out[blockIdx.x] = acc;
}

// 16 bytes a thread, UNROLL loads in flight, grid-stride; the xor keeps the loads.
template <int UNROLL>
__global__ void vector_read(const uint4* __restrict__ src, long long n16, float* out) {
  uint32_t acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) out[0] = 1.0f;
}

}  // namespace

void bulk(at::Tensor src, int64_t bytes, at::Tensor out, int64_t grid, int64_t chunk, int64_t stages) {
  TORCH_CHECK(stages >= 1 && stages <= 16 && chunk % 16 == 0, "read_floor: 1-16 stages of a multiple of 16 bytes");
  const int smem = static_cast<int>(chunk * stages);
  C10_CUDA_CHECK(cudaFuncSetAttribute(bulk_read, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  bulk_read<<<grid, 32, smem, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const char*>(src.data_ptr()), bytes, static_cast<int>(chunk), static_cast<int>(stages),
      out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void vector(at::Tensor src, int64_t bytes, at::Tensor out, int64_t grid, int64_t threads) {
  vector_read<4><<<grid, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const uint4*>(src.data_ptr()), bytes / 16, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
void bulk(at::Tensor src, int64_t bytes, at::Tensor out, int64_t grid, int64_t chunk, int64_t stages);
void vector(at::Tensor src, int64_t bytes, at::Tensor out, int64_t grid, int64_t threads);
"""


@dataclass(frozen=True)
class ReadKernel:
    """One way to read: bulk copies (``chunk`` bytes, ``stages`` in flight) or 16-byte loads (``threads``)."""
    kind: str  # "bulk" or "vector"
    blocks_per_sm: int
    chunk: int = 0
    stages: int = 0
    threads: int = 0

    def label(self) -> str:
        blocks = f"{self.blocks_per_sm} block{'s' if self.blocks_per_sm > 1 else ''}/SM"
        if self.kind == "bulk":
            return f"bulk {blocks} {self.stages} x {self.chunk // 1024} KiB"
        return f"16-byte loads {blocks} x {self.threads} threads"


# The probe of 2026-12-01 (docs/benchmarks.md, "2026-12-01 (decode read floor)") tried 17 ways; these
# four were within 1% of its best at 16.8 and 134.2 MB.
READ_KERNELS = (ReadKernel("bulk", 1, 32768, 6), ReadKernel("bulk", 2, 32768, 3), ReadKernel("bulk", 4, 16384, 3),
                ReadKernel("vector", 8, threads=256))


@dataclass(frozen=True)
class Size:
    label: str
    bytes: int


def task_sizes(task_name: str, where: dict[str, int] | None) -> list[Size]:
    """Each public GPU shape of the task (those matching ``where``) with the bytes its cost model moves, for
    the task's first dtype."""
    task = subset_task(load_task(task_name), "cuda", first_dtype=True, where=where or None)
    dtype = task.dtypes[0]
    sizes = []
    for shape in task.shape_set("cuda").public:
        cost = task.shape_cost(shape, dtype)
        if cost is None:
            raise ValueError(f"{task_name} has no cost model for {shape}")
        label = f"{task_name} " + " ".join(f"{k}={v}" for k, v in shape.items())
        sizes.append(Size(label, int(cost.bytes)))
    return sizes


def megabyte_sizes(mbs: list[float]) -> list[Size]:
    for mb in mbs:
        if not mb > 0:
            raise ValueError(f"--mb wants sizes above 0, got {mb:g}")
    return [Size(f"{mb:g} MB", int(mb * 1e6)) for mb in mbs]


def measure(sizes: list[Size], reps: int, rows: list[dict] | None = None) -> list[str]:
    """The table's lines; each size's figures are appended to ``rows`` too when given."""
    module = load_cached("ratchet_read_floor", CUDA_SRC, CPP_SRC, ["bulk", "vector"], no_implicit_headers=True)
    flush = L2Flusher(torch.device("cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(8 * sms, device="cuda")

    def graph_us(fn) -> float:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):  # builds and sets up outside the capture
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return timed_median_us(graph.replay, flush, reps)

    one = torch.zeros(1, device="cuda")
    fill_us = graph_us(lambda: one.fill_(1.0))
    lines = [f"{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}, CUDA-graph replays after the judge's "
             f"L2 flush and a 200 µs hold, median of {reps}; a one-element fill: {fill_us:.2f} µs",
             "| size | MB | best read µs | TB/s | TB/s past the fill | best way | "
             + ", ".join(way.label() for way in READ_KERNELS) + " (µs) |",
             "|---|---|---|---|---|---|---|"]
    for size in sizes:
        nbytes = (size.bytes + 15) // 16 * 16  # bulk copies move whole 16-byte words
        buffer = torch.randn(nbytes // 4, device="cuda")
        times = {}
        for way in READ_KERNELS:
            grid = way.blocks_per_sm * sms
            if way.kind == "bulk":
                times[way] = graph_us(lambda: module.bulk(buffer, nbytes, out, grid, way.chunk, way.stages))
            else:
                times[way] = graph_us(lambda: module.vector(buffer, nbytes, out, grid, way.threads))
        best = min(times, key=times.get)
        mb, us = size.bytes / 1e6, times[best]
        every = ", ".join(f"{t:.2f}" for t in times.values())
        lines.append(f"| {size.label} | {mb:.1f} | {us:.2f} | {mb / us:.2f} | {mb / (us - fill_us):.2f} | "
                     f"{best.label()} | {every} |")
        print(lines[-1], flush=True)
        if rows is not None:
            rows.append({"size": size.label, "mb": mb, "best_read_us": us, "achieved_tbps": mb / us,
                         "tbps_past_fill": mb / (us - fill_us), "fill_us": fill_us, "best_way": best.label(),
                         "reps": reps})
        del buffer
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--task", help="sizes from this task's cost model, one per public GPU shape")
    parser.add_argument("--where", nargs="+", metavar="SIZE=N", help="only the task's public shapes with these sizes")
    parser.add_argument("--mb", nargs="+", type=float, metavar="MB", help="sizes in megabytes (10^6 bytes)")
    parser.add_argument("--reps", type=int, default=100, help="timed replays a row (default 100)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    try:  # the arguments first, so a wrong one is said on any machine
        if not args.task and not args.mb:
            raise ValueError("give --task or --mb")
        if args.where and not args.task:
            raise ValueError("--where needs --task")
        if args.reps < 1:
            raise ValueError(f"--reps wants 1 or more, got {args.reps}")
        sizes = (task_sizes(args.task, parse_where(args.where)) if args.task else []) + megabyte_sizes(args.mb or [])
    except (ValueError, TaskError) as exc:
        return refused("read_floor", exc)
    if not torch.cuda.is_available():
        return refused("read_floor", "needs a CUDA device")
    rows: list[dict] = []
    emit_table(measure(sizes, args.reps, rows), args.out)
    record_results("read_floor", rows, device="cuda", command=command_line("benchmarks.probes.read_floor", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
