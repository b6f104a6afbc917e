"""Top-p sampling in CUDA C++ with Hopper thread-block clusters: a row is read once and every pass after
that runs over registers and shared memory.

The idea: the Triton seeds make three passes over the logits in global memory (the split-row seed), and
each pass is bound by the instructions of a one-hot histogram (ncu, 2026-11-30: 75 issued per logit),
because Triton has neither a weighted histogram nor a place to keep a 128k-wide row. Here a row's pieces
are the blocks of one cluster (sm_90). Each block loads its piece once (THREADS x PER_THREAD values in
registers, THREADS x SMEM_PER_THREAD in shared memory, as in the softmax seed), and the blocks exchange
histograms through distributed shared memory. Every later pass reads the resident piece, so DRAM sees
the logits once, and a histogram costs a dozen instructions per logit:

* Keys are the logits themselves, not probabilities: the nucleus is every token whose logit is at least
  a cut, and two tokens tie exactly when their fp32 logits are equal (the task's rule; -0.0 and +0.0 are
  one key). Probabilities exp(x - max) are recomputed where a pass needs a mass, never stored.
* Levels narrow a key range that holds the cut, keeping `above`, the mass of the keys past its top:
  1. Wide: 1-nat cells (floor(x), exact), 16 bins: the 15 nats below the max, and everything below.
     Every resident logit, one exp each; a lane adds to its own column of its warp's histogram
     (hist[bin * 32 + lane]: no atomics, no bank conflicts). The first wide level uses the block's own
     max, and the exchange shifts and scales the blocks' bins to the row's, so the row max costs no
     exchange of its own. A cut below the window takes another 15 nats: no row needs a special case.
  2. Each warp then lists its logits inside the chosen nat (ballots, no atomics), in the memory the wide
     histograms used. Narrow levels pass over the list (or, for a warp whose list overflows, over the
     warp's resident logits), with shared-memory atomics: 1/128-nat cells (exact), 128 bins, then the
     order-preserving 32-bit keys, 128 bins a level, with counts and each bin's top key, until one key
     (or one token) remains: one or two key levels on the task's rows.
* Each level: one pass, one cluster barrier, then every block sums the cluster's histograms in rank order
  and scans them, so all blocks reach the same decision with no second barrier (the exchange buffers
  alternate).
* The draw: each block's nucleus mass, a scan over blocks and threads, and inverse-CDF sampling with one
  uniform a row drawn in the kernel from torch's CUDA generator (Philox-4x32-10 at the generator's seed
  and offset, subsequence = row; graph-safe, and seeded by torch.manual_seed like torch.rand, without
  torch.rand's launch). The thread whose interval holds the draw walks its own logits. The intervals
  tile [0, mass) exactly, so one thread in the row writes the token.
top_p >= 1 keeps every token with a nonzero mass (no search); top_p <= 0 keeps the top tie group.
"Exact" means an exact cut for the fp32 masses the kernel sums (off by ~1e-6 of the row's mass at worst;
the task allows 1e-5).

Limits: fp32 CUDA logits; a row must fit its cluster's registers and shared memory
(V <= MAX_CLUSTER x THREADS x (PER_THREAD + SMEM_PER_THREAD); every config of SPACE holds 131072), and a
wider row is a ValueError. THREADS, PER_THREAD and SMEM_PER_THREAD are -D defines: each is one cached
build (ratchet.cuda_build). Clusters use at most the portable size, 8.

Measured on the H200 (2026-11-30, top-p cluster seed, `python -m benchmarks.probes.eval_seeds --tasks top_p_sampling
--seeds cuda_cluster --where V=129280 --first-dtype --repeats 1`, judged; docs/benchmarks.md): B=64 45.0-45.1
us (split-row 149.5 at its default in the same kind of run, 134 at its best config), B=1 33.0-33.5,
B=16 34.4-34.7, B=256 123.2-123.8. The first version (exp2f, one exchange for the max, block-wide
compaction) took 55.8 at B=64; the estimate written before any GPU ran it was ~20 us. Where the rest goes
(clock64 stamps a phase, B=64, L2 warm): the load ~4 us, the wide pass ~4, each of four exchanges
(barrier, remote reads, scan) 1.5-2.5, the list ~3, the draw ~2.5.
"""

import functools

import torch

from ratchet.cuda_build import load_cached

SPACE = {"THREADS": [256, 512], "PER_THREAD": [32, 16], "SMEM_PER_THREAD": [32, 16, 48], "MAX_CLUSTER": [8, 4]}
# 64 registers a thread (four 256-thread blocks or two 512-thread blocks an SM), so PER_THREAD stays at
# 32; every config holds the task's widest row (129280) in one cluster (4 blocks need 512 threads).
CONSTRAINTS = ["THREADS * (PER_THREAD + SMEM_PER_THREAD) * MAX_CLUSTER >= 131072"]

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

std::vector<at::Tensor> top_p(at::Tensor logits, at::Tensor top_p, int64_t max_cluster, int64_t sms);
"""

CUDA_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#ifndef CFG_THREADS
#define CFG_THREADS 256
#endif
#ifndef CFG_PER_THREAD
#define CFG_PER_THREAD 32
#endif
#ifndef CFG_SMEM_PER_THREAD
#define CFG_SMEM_PER_THREAD 32
#endif

namespace cg = cooperative_groups;
// Internal linkage for everything but the entry point: each config is its own module, and a static local
// of a template function (the opt-in guard in launch) would otherwise be one symbol shared by every
// module loaded in the process (STB_GNU_UNIQUE), so a second config skipped its opt-in and failed to
// launch (2026-11-30, on the H200).
namespace {
constexpr int kThreads = CFG_THREADS;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = CFG_PER_THREAD;        // logits a thread keeps in registers
constexpr int kSmemPerThread = CFG_SMEM_PER_THREAD;  // and in shared memory
constexpr int kSlots = kPerThread + kSmemPerThread;
constexpr int kRegCap = kThreads * kPerThread;
constexpr int kNatBins = 16;  // bins of the wide levels (1-nat cells, every resident logit)
// Bins of the narrow levels (1/128-nat cells, then keys). 128, not 256: 3 KB less a block, so four
// 256-thread blocks (54 KB of shared memory each) fit an SM.
constexpr int kKeyBins = 128;
constexpr int kFine = 128;  // 1/kFine-nat cells in the first narrow level
constexpr int kWarpListCap = kNatBins * 32;  // logits a warp's list holds (in its wide-level histogram)
constexpr int kMaxCluster = 8;
constexpr int kSuffix = 32;  // where the first exchange keeps a block's suffix sums
constexpr int kMaxLevels = 64;  // a guard: the task's rows take 3 to 5 levels
constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kMinKey = 0x007FFFFFu;  // the key of -inf (keys below it are NaNs)
constexpr uint32_t kMaxKey = 0xFF800000u;  // the key of +inf
static_assert(kThreads >= kKeyBins && kThreads % 32 == 0, "one thread per key bin");
static_assert(kPerThread % 4 == 0 && kSmemPerThread % 4 == 0, "whole 16-byte vectors");

// An order-preserving key: a < b as floats iff key(a) < key(b); -0.0 and +0.0 are one key.
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The float of a key. 0x7FFFFFFF (-0.0) is no float's key: as a bound it moves to its neighbour, so
// comparing floats against the bounds tests exactly the keys in between.
__device__ __forceinline__ float lower_value(uint32_t k) {
  if (k == 0x7FFFFFFFu) k = 0x80000000u;
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
__device__ __forceinline__ float upper_value(uint32_t k) {
  if (k == 0x7FFFFFFFu) k = 0x7FFFFFFEu;
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// Cells: floor(x * scale) of x clamped to +-2^21 nats first, so -inf is a cell and a clamped cell means
// the same logits at every scale (the cells past the clamp are unbounded on that side: see the level
// updates). 1-nat cells by the round-down add of 1.5 * 2^23, which is exact for |v| <= 2^21 and a
// full-rate FADD, where a float-to-int conversion shares the exp unit's quarter rate (the wide pass
// runs one exp per logit already).
constexpr float kClampX = 2097152.0f;
__device__ __forceinline__ int nat_cell(float x) {
  const float v = fminf(fmaxf(x, -kClampX), kClampX);
  return __float_as_int(__fadd_rd(v, 12582912.0f)) - 0x4B400000;
}
__device__ __forceinline__ int fine_cell(float x) {
  return __float2int_rd(fminf(fmaxf(x, -kClampX), kClampX) * static_cast<float>(kFine));
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// A uniform in [0, 1) from Philox-4x32-10 (Salmon et al., SC'11) at counter (offset, row) under key seed:
// torch's generator hands out (seed, offset) so draws are fresh on every call and replay, as torch.rand's
// are. Written here because the CUDA toolkit's curand headers are not everywhere a torch build is.
__device__ __forceinline__ float philox_uniform(uint64_t seed, uint64_t offset, uint64_t row) {
  uint32_t c0 = static_cast<uint32_t>(offset), c1 = static_cast<uint32_t>(offset >> 32);
  uint32_t c2 = static_cast<uint32_t>(row), c3 = static_cast<uint32_t>(row >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return static_cast<float>(c0 >> 8) * (1.0f / 16777216.0f);
}

// exp(x - m) as 2^((x - m) log2 e) on the exp unit (ex2.approx.ftz: masses below 2^-126 of the max are
// zero, far under the task's 1e-5). Not fmaf(x, log2 e, -m log2 e): m log2 e is rounded, and at |m| ~ 1e30
// (a test row) that rounding alone is ~1e23 in the exponent. Not exp2f: its denormal fix-up costs four
// instructions a logit. volatile: otherwise the compiler hoists x - m of all 32 register logits out of
// the level loop and spills them (2026-11-30: 120 bytes of stack, a local load a logit in every pass).
__device__ __forceinline__ float mass(float x, float m) {
  float y;
  asm volatile("{\n\t.reg .f32 d;\n\tsub.f32 d, %1, %2;\n\tmul.f32 d, d, 0f3FB8AA3B;\n\tex2.approx.ftz.f32 %0, d;\n\t}"
               : "=f"(y) : "f"(x), "f"(m));
  return y;
}

// Calls f(x, slot) for each logit the thread holds: registers first, then its shared-memory part.
template <typename F>
__device__ __forceinline__ void for_each(const float (&v)[kPerThread], const float* stash, F&& f) {
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) f(v[e], e);
#pragma unroll 8
  for (int e = 0; e < kSmemPerThread; ++e) f(stash[e * kThreads + threadIdx.x], kPerThread + e);
}

// The column of a thread's slot: vectors of VEC logits, kThreads vectors apart.
template <int VEC>
__device__ __forceinline__ int64_t column(int64_t lo, int slot) {
  const int base = slot < kPerThread ? 0 : kRegCap;
  const int s = slot < kPerThread ? slot : slot - kPerThread;
  return lo + base + static_cast<int64_t>((s / VEC) * kThreads + threadIdx.x) * VEC + s % VEC;
}

// The piece [lo, hi) into registers and shared memory (element-major there: a warp's accesses are
// contiguous); -inf past hi. Whole vectors: hi - lo is a multiple of VEC or hi is the row's end.
template <int VEC>
__device__ __forceinline__ float load_piece(const float* xr, int64_t lo, int64_t hi, float (&v)[kPerThread],
                                            float* stash) {
  const int left = static_cast<int>(hi - lo) - static_cast<int>(threadIdx.x) * VEC;
  const float* p = xr + lo + threadIdx.x * VEC;
  float mt = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerThread / VEC; ++k) {
    const int off = k * kThreads * VEC;
    if constexpr (VEC == 4) {
      const float4 f = off < left ? *reinterpret_cast<const float4*>(p + off)
                                  : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      v[4 * k] = f.x; v[4 * k + 1] = f.y; v[4 * k + 2] = f.z; v[4 * k + 3] = f.w;
    } else {
      v[k] = off < left ? p[off] : -INFINITY;
    }
  }
#pragma unroll
  for (int k = 0; k < kSmemPerThread / VEC; ++k) {
    const int off = kRegCap + k * kThreads * VEC;
    float f[VEC];
    if constexpr (VEC == 4) {
      const float4 g = off < left ? *reinterpret_cast<const float4*>(p + off)
                                  : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      f[0] = g.x; f[1] = g.y; f[2] = g.z; f[3] = g.w;
    } else {
      f[0] = off < left ? p[off] : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      stash[(k * VEC + j) * kThreads + threadIdx.x] = f[j];
      mt = fmaxf(mt, f[j]);
    }
  }
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) mt = fmaxf(mt, v[e]);
  return mt;
}

struct Shared {
  float mass[2][kKeyBins];  // the exchange: this block's histogram (or max, or nucleus mass), two buffers
  int count[2][kKeyBins];
  uint32_t top[2][kKeyBins];  // the largest key in each bin
  float scan[kThreads];
  float warp_total[kWarps];
  int bin_count[kKeyBins];  // a narrow level's counts and top keys summed over the cluster
  uint32_t bin_top[kKeyBins];
  int bin, fallback;
  float draw, block_lo, block_hi;
};

// A level's decision, the same in every block of the cluster.
struct Decision {
  int bin;
  float before;  // above plus the mass of the bins before it
  int count;     // narrow levels: the logits in the bin, and the largest key among them
  uint32_t top;
};

// Inclusive scan of v over the block into sh.scan; returns the thread's value. Deterministic: every
// block that scans the same values gets the same floats.
__device__ __forceinline__ float block_scan(float v, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += u;
  }
  if (lane == 31) sh.warp_total[warp] = v;
  __syncthreads();
  float prefix = 0.0f;
  for (int w = 0; w < warp; ++w) prefix += sh.warp_total[w];
  v += prefix;
  sh.scan[threadIdx.x] = v;
  __syncthreads();
  return v;
}

// After the cluster barrier: bin t of the narrow levels' histograms summed over the cluster's blocks in
// rank order (the same floats in every block), with their counts and top keys.
__device__ __forceinline__ float gather_bins(const cg::cluster_group& cluster, int C, int buf, int nbins, Shared& sh,
                                             int& n, uint32_t& top) {
  const int t = threadIdx.x;
  float h = 0.0f;
  n = 0;
  top = 0;
  if (t < nbins) {
    // Unrolled over ranks so the remote loads can be in flight together (one at a time, 8 ranks took
    // ~1 us a level); the adds stay in rank order.
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < C) {
        const Shared* other = cluster.map_shared_rank(&sh, r);
        h += other->mass[buf][t];
        n += other->count[buf][t];
        top = max(top, other->top[buf][t]);
      }
    }
  }
  return h;
}

// The row's max (every block's, from sh.mass[buf][slot]) after the cluster barrier, in every thread.
__device__ __forceinline__ float gather_max(const cg::cluster_group& cluster, int C, int buf, int slot, Shared& sh) {
  float m = -INFINITY;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    if (r < C) m = fmaxf(m, cluster.map_shared_rank(&sh, r)->mass[buf][slot]);
  }
  return m;
}

// Scans the bins (h in thread t < nbins) from the top and picks the first bin where above + mass reaches
// target (or, if fp32 rounding leaves target out of reach, the last bin with mass). With set_target,
// target becomes top_p times the histogram's total.
__device__ __forceinline__ Decision decide(float h, int n, uint32_t top, int nbins, bool counts, float above,
                                           float tp, bool set_target, float& target, Shared& sh) {
  const int t = threadIdx.x;
  if (counts && t < nbins) { sh.bin_count[t] = n; sh.bin_top[t] = top; }
  if (t == 0) { sh.bin = -1; sh.fallback = -1; }
  block_scan(h, sh);  // its barriers also publish the counts, bin and fallback
  // At least a nonzero mass: top_p <= 0 keeps the top tie group (the first bin with mass), as the
  // split-row seed does, instead of finding no crossing and falling back to the last bin.
  if (set_target) target = fmaxf(tp * sh.scan[nbins - 1], 1e-30f);
  if (t < nbins) {
    const float lo = above + (t ? sh.scan[t - 1] : 0.0f), hi = above + sh.scan[t];
    if (hi >= target && lo < target) sh.bin = t;  // the one bin where the running mass crosses
    if (h > 0.0f) atomicMax(&sh.fallback, t);
  }
  __syncthreads();
  // Read by every thread; nothing rewrites these before the next barrier (the next writer of sh.scan is
  // a block_scan, whose barrier comes first).
  const int chosen = sh.bin >= 0 ? sh.bin : max(sh.fallback, 0);
  return {chosen, above + (chosen ? sh.scan[chosen - 1] : 0.0f), counts ? sh.bin_count[chosen] : 0,
          counts ? sh.bin_top[chosen] : 0u};
}

// The narrow levels' histogram (shared-memory atomics): the logits in [vlo, vhi] by bin(x). From the
// warp's list when it holds them all (listed logits, whole warp), else from the warp's resident logits.
template <typename Bin>
__device__ __forceinline__ void narrow_pass(const float (&v)[kPerThread], const float* stash, const float* list,
                                            int listed, float vlo, float vhi, float m, int buf, Shared& sh,
                                            Bin&& bin) {
  auto add = [&](float x, int) {
    if (x >= vlo && x <= vhi) {
      const int b = bin(x);
      atomicAdd(&sh.mass[buf][b], mass(x, m));
      atomicAdd(&sh.count[buf][b], 1);
      atomicMax(&sh.top[buf][b], order_key(x));
    }
  };
  if (listed <= kWarpListCap) {
    for (int i = threadIdx.x % 32; i < listed; i += 32) add(list[i], 0);
  } else {
    for_each(v, stash, add);
  }
}

template <int VEC>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
top_p_cluster(const float* __restrict__ logits, const float* __restrict__ top_p, at::PhiloxCudaState rng,
              int64_t* __restrict__ out, int64_t* __restrict__ cuts, int64_t B, int64_t V, int64_t chunk) {
  __shared__ Shared sh;
  // The logits' shared-memory part, then one 16-bin histogram a warp (hist[bin * 32 + lane]), which the
  // narrow levels reuse as the block's list of the logits inside the chosen nat.
  extern __shared__ float dyn[];
  float* stash = dyn;
  float* hists = dyn + kThreads * kSmemPerThread;
  float* lane_hist = hists + (threadIdx.x / 32) * kNatBins * 32 + threadIdx.x % 32;
  cg::cluster_group cluster = cg::this_cluster();
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int t = threadIdx.x, lane = t % 32;
  float v[kPerThread];
  int buf = 0;
  for (int64_t row = blockIdx.y; row < B; row += gridDim.y) {
    const int64_t lo = min64(V, rank * chunk), hi = min64(V, lo + chunk);
    const float tp = top_p[row];

    // The piece, and the block's max (every thread).
    float mb = load_piece<VEC>(logits + row * V, lo, hi, v, stash);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, off));
    if (lane == 0) sh.warp_total[t / 32] = mb;
    __syncthreads();
    mb = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mb = fmaxf(mb, sh.warp_total[w]);
    float m;  // the row's max, from the first exchange

    // The cut: the smallest key in the nucleus.
    uint32_t cut = kMinKey;
    if (tp >= 1.0f) {  // every token: only the max to exchange
      if (t == 0) sh.mass[buf][0] = mb;
      cluster.sync();
      m = gather_max(cluster, C, buf, 0, sh);
      buf ^= 1;
    } else {
      uint32_t klo = kMinKey, khi = kMaxKey;
      enum { kWide, kNarrowNat, kKey } kind = kWide;
      int ctop = 0;  // the top cell of a cell level: its bin 0
      int listed = kWarpListCap + 1;  // no list yet
      float above = 0.0f, target = 0.0f;
      for (int level = 0; level < kMaxLevels; ++level) {
        const float vlo = lower_value(klo), vhi = upper_value(khi);
        int nbins = kKeyBins, shift = 0;
        if (kind == kWide) {
          // Every resident logit. Each lane adds to its own column of its warp's histogram: no atomics, no
          // bank conflicts. The first level needs no row max: its cells and masses are the block's own,
          // relative to the block's max, and the exchange moves them to the row's (one exchange less).
#pragma unroll
          for (int b = 0; b < kNatBins; ++b) lane_hist[b * 32] = 0.0f;
          const float ref = level == 0 ? mb : m;
          const int top = level == 0 ? nat_cell(mb) : ctop;
          // Unsigned, so a cell above top (none, unless the clamp moved it) lands in the last bin.
          auto add = [&](float x, int) {
            const int b = static_cast<int>(min(static_cast<unsigned>(top - nat_cell(x)), kNatBins - 1u));
            lane_hist[b * 32] += mass(x, ref);
          };
          if (level > 0) {
            for_each(v, stash, [&](float x, int slot) {
              if (x >= vlo && x <= vhi) add(x, slot);
            });
          } else if (mb > -INFINITY) {  // a block past the row's end holds only -inf: no mass
            for_each(v, stash, add);
          }
          __syncthreads();
          // Bin b's sum over the block: 16 threads a bin, each over every 16th lane column.
          if (t < kNatBins * 16) {
            const int b = t / 16, sub = t % 16;
            const float* h0 = hists + b * 32;
            float s = 0.0f;
            for (int p = sub; p < kThreads; p += 16) s += h0[(p / 32) * kNatBins * 32 + p % 32];
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (sub == 0) sh.mass[buf][b] = s;
          }
          if (level == 0) {
            // The first exchange also carries the block's max and its bins' suffix sums (slots kSuffix..):
            // a block whose top cell lies below the row's adds a suffix into the row's last bin.
            __syncthreads();
            if (t < kNatBins) {
              float suffix = 0.0f;
              for (int j = t; j < kNatBins; ++j) suffix += sh.mass[buf][j];
              sh.mass[buf][kSuffix + t] = suffix;
            }
            if (t == 0) sh.mass[buf][kNatBins] = mb;
          }
          nbins = kNatBins;
        } else {
          sh.mass[buf][t % kKeyBins] = 0.0f;  // threads past kKeyBins repeat a zero
          sh.count[buf][t % kKeyBins] = 0;
          sh.top[buf][t % kKeyBins] = 0u;
          __syncthreads();
          if (kind == kNarrowNat) {
            narrow_pass(v, stash, hists + (t / 32) * kWarpListCap, listed, vlo, vhi, m, buf, sh, [&](float x) {
              return static_cast<int>(min(static_cast<unsigned>(ctop - fine_cell(x)), kKeyBins - 1u));
            });
          } else {
            const uint32_t width = khi - klo;
            shift = width < kKeyBins ? 0 : (32 - __clz(width)) - 7;
            nbins = static_cast<int>(width >> shift) + 1;
            narrow_pass(v, stash, hists + (t / 32) * kWarpListCap, listed, vlo, vhi, m, buf, sh,
                        [&](float x) { return static_cast<int>((khi - order_key(x)) >> shift); });
          }
        }
        cluster.sync();  // every block's histogram is complete
        int n = 0;
        uint32_t top = 0;
        float h = 0.0f;
        if (level == 0) {
          // The row's max and top cell; each block's bins move down by its top cell's distance from the
          // row's (its bin 15 and those past the window add up into the row's bin 15) and scale by
          // exp(block max - row max).
          m = gather_max(cluster, C, buf, kNatBins, sh);
          ctop = nat_cell(m);
          if (t < kNatBins) {
#pragma unroll
            for (int r = 0; r < kMaxCluster; ++r) {
              if (r < C) {
                const Shared* other = cluster.map_shared_rank(&sh, r);
                const float mr = other->mass[buf][kNatBins];
                const int shift_r = ctop - nat_cell(mr);
                float part = 0.0f;
                if (t < kNatBins - 1) {
                  if (t >= shift_r) part = other->mass[buf][t - shift_r];
                } else {
                  part = other->mass[buf][kSuffix + max(0, kNatBins - 1 - shift_r)];
                }
                h += mr > -INFINITY ? part * mass(mr, m) : 0.0f;
              }
            }
          }
        } else if (kind == kWide) {
          h = t < kNatBins ? gather_bins(cluster, C, buf, kNatBins, sh, n, top) : 0.0f;
        } else {
          h = gather_bins(cluster, C, buf, nbins, sh, n, top);
        }
        const Decision d = decide(h, n, top, nbins, kind != kWide, above, tp, level == 0, target, sh);
        buf ^= 1;
        const int b = d.bin;
        above = d.before;
        if (kind == kWide && b == kNatBins - 1) {  // below the window: the next 15 nats
          khi = min(khi, order_key(static_cast<float>(ctop - (kNatBins - 2))) - 1u);
          ctop -= kNatBins - 1;
        } else if (kind != kKey) {
          const float scale = kind == kWide ? 1.0f : static_cast<float>(kFine);
          const int c = ctop - b;
          const float lo_v = static_cast<float>(c) / scale;  // exact: |c| <= 2^28, scale a power of two
          if (lo_v > -kClampX) klo = max(klo, order_key(lo_v));
          if (lo_v < kClampX) khi = min(khi, order_key(static_cast<float>(c + 1) / scale) - 1u);
          if (kind == kWide) {
            // The chosen nat, a few thousand logits at most on the task's rows: list them, so the narrow
            // levels pass over the list instead of every resident logit.
            kind = kNarrowNat;
            ctop = c * kFine + (kFine - 1);
            // Each warp appends its logits in the nat to its own list (ballots: no atomics, no barrier).
            const float nlo = lower_value(klo), nhi = upper_value(khi);
            float* list = hists + (t / 32) * kWarpListCap;
            int n = 0;  // the same in every lane of the warp
            for_each(v, stash, [&](float x, int) {
              const bool in = x >= nlo && x <= nhi;
              const unsigned ballot = __ballot_sync(0xffffffffu, in);
              const int at = n + __popc(ballot & ((1u << lane) - 1u));
              if (in && at < kWarpListCap) list[at] = x;
              n += __popc(ballot);
            });
            listed = n;  // more than kWarpListCap: this warp's narrow passes go over its resident logits
          } else {
            kind = kKey;
            if (d.count == 1) { klo = khi = d.top; }  // one token in the fine cell: its key
          }
        } else {
          const uint32_t mask = (1u << shift) - 1u;
          khi -= static_cast<uint32_t>(b) << shift;
          klo = khi - klo >= mask ? khi - mask : klo;
          if (d.count == 1) { klo = khi = d.top; }  // one token left: its key
        }
        if (klo >= khi) break;
      }
      cut = klo;
    }

    if (t == 0 && rank == 0) cuts[row] = cut;  // for tests: the nucleus is every key >= cut

    // The draw: the nucleus mass of each thread, block and rank, then the token under u * total.
    const float vcut = lower_value(cut);
    float own = 0.0f;
    for_each(v, stash, [&](float x, int) {
      if (x >= vcut) own += mass(x, m);
    });
    block_scan(own, sh);
    if (t == 0) sh.mass[buf][0] = sh.scan[kThreads - 1];
    cluster.sync();
    if (t == 0) {
      float total = 0.0f, mine_lo = 0.0f, mine_hi = 0.0f, parts[kMaxCluster];
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) parts[r] = r < C ? cluster.map_shared_rank(&sh, r)->mass[buf][0] : 0.0f;
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {  // in rank order: the same floats in every block
        const float next = total + parts[r];
        if (r == rank) { mine_lo = total; mine_hi = next; }
        total = next;
      }
      // One uniform a row from torch's generator (Philox, subsequence = row): the same in every block.
      // Under graph capture the generator's seed and offset are read when the graph replays.
      const uint64_t seed = rng.captured_ ? static_cast<uint64_t>(*rng.seed_.ptr) : rng.seed_.val;
      const uint64_t offset = rng.captured_ ? static_cast<uint64_t>(*rng.offset_.ptr) + rng.offset_intragraph_
                                            : rng.offset_.val;
      float u = philox_uniform(seed, offset, static_cast<uint64_t>(row)) * total;
      if (u >= total) u = nextafterf(total, 0.0f);
      sh.draw = u; sh.block_lo = mine_lo; sh.block_hi = mine_hi;
    }
    buf ^= 1;
    __syncthreads();
    if (sh.block_lo <= sh.draw && sh.draw < sh.block_hi) {  // this block holds the draw
      const float block_mass = sh.scan[kThreads - 1];
      float r = sh.draw - sh.block_lo;
      if (r >= block_mass) r = nextafterf(block_mass, 0.0f);
      const float lo_t = t ? sh.scan[t - 1] : 0.0f;
      if (lo_t <= r && r < sh.scan[t]) {
        const float rest = r - lo_t;
        float run = 0.0f;
        int pick = -1, last = -1;
        for_each(v, stash, [&](float x, int slot) {
          if (x >= vcut) {
            const float p = mass(x, m);
            if (p > 0.0f) {
              run += p;
              last = slot;
              if (pick < 0 && run > rest) pick = slot;
            }
          }
        });
        if (pick < 0) pick = last;
        out[row] = column<VEC>(lo, pick);
      }
    }
    __syncthreads();  // sh.scan is rewritten by the next row
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
}

template <int VEC>
void launch(const at::Tensor& x, const at::Tensor& tp, at::PhiloxCudaState rng, at::Tensor& out, at::Tensor& cuts,
            int64_t max_cluster, int64_t sms, cudaStream_t stream) {
  const int64_t B = x.size(0), V = x.size(1);
  constexpr int64_t kCap = static_cast<int64_t>(kThreads) * kSlots;  // logits a block holds
  const int64_t need = (V + kCap - 1) / kCap;
  const int64_t c = std::max<int64_t>(need, std::min<int64_t>(max_cluster, std::max<int64_t>(1, sms / B)));
  TORCH_CHECK(max_cluster >= 1 && max_cluster <= kMaxCluster, "top_p: MAX_CLUSTER must be 1 to ", kMaxCluster);
  TORCH_CHECK(c <= max_cluster, "top_p: a row of ", V, " logits needs ", need, " blocks of ", kCap,
              " (THREADS x (PER_THREAD + SMEM_PER_THREAD)), more than MAX_CLUSTER = ", max_cluster);
  const int64_t chunk = ((V + c - 1) / c + VEC - 1) / VEC * VEC;
  auto kernel = top_p_cluster<VEC>;
  const size_t smem = sizeof(float) * (kThreads * kSmemPerThread + kWarps * kNatBins * 32);
  static const bool opted = [&] {  // once per module (internal linkage: see the namespace above)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)opted;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(c);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(c), static_cast<unsigned>(std::min<int64_t>(B, 65535)), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, x.data_ptr<float>(), tp.data_ptr<float>(), rng,
                                    out.data_ptr<int64_t>(), cuts.data_ptr<int64_t>(), B, V, chunk));
}

}  // namespace

std::vector<at::Tensor> top_p(at::Tensor logits, at::Tensor top_p, int64_t max_cluster, int64_t sms) {
  TORCH_CHECK(logits.is_cuda() && logits.dim() == 2 && logits.scalar_type() == at::kFloat,
              "top_p: expects fp32 CUDA logits [B, V]");
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor x = logits.contiguous();
  TORCH_CHECK(x.size(1) > 0, "top_p: a row needs at least one logit");
  at::Tensor out = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  at::Tensor cuts = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  if (x.size(0) == 0) return {out, cuts};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // torch's default generator for this device, as torch.rand would use it (graph-safe offsets under capture).
  auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(std::nullopt,
                                                                  at::cuda::detail::getDefaultCUDAGenerator());
  at::PhiloxCudaState rng;
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    rng = gen->philox_cuda_state(4);  // one Philox call (4 values) a row, subsequence = row
  }
  const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && x.size(1) % 4 == 0;
  if (aligned) launch<4>(x, top_p, rng, out, cuts, max_cluster, sms, stream);
  else launch<1>(x, top_p, rng, out, cuts, max_cluster, sms, stream);
  return {out, cuts};
}
"""


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _run(logits, top_p, THREADS, PER_THREAD, SMEM_PER_THREAD, MAX_CLUSTER):
    # The build comes first: without a CUDA toolkit the first call is a build error (compile_error to the
    # judge), as for the other CUDA seeds.
    module = load_cached("ratchet_top_p_cluster", CUDA_SRC, CPP_SRC, ["top_p"],
                         defines={"CFG_THREADS": THREADS, "CFG_PER_THREAD": PER_THREAD,
                                  "CFG_SMEM_PER_THREAD": SMEM_PER_THREAD}, no_implicit_headers=True)
    # Checked here, not only in C++: a C++ exception from this module has crashed the process on the H200
    # (2026-11-30) instead of raising.
    if not (logits.is_cuda and logits.dim() == 2 and logits.dtype == torch.float32):
        raise ValueError(f"top_p: expects fp32 CUDA logits [B, V], got {logits.dtype} {tuple(logits.shape)} "
                         f"on {logits.device}")
    cap = THREADS * (PER_THREAD + SMEM_PER_THREAD)
    need = -(-logits.shape[1] // cap)
    if need > MAX_CLUSTER:
        raise ValueError(f"top_p: a row of {logits.shape[1]} logits needs {need} blocks of {cap} "
                         f"(THREADS x (PER_THREAD + SMEM_PER_THREAD)), more than MAX_CLUSTER = {MAX_CLUSTER}")
    sms = _sm_count(logits.device.index or 0)
    top_p = top_p.to(device=logits.device, dtype=torch.float32).contiguous()
    return module.top_p(logits, top_p, MAX_CLUSTER, sms)


def kernel(logits, top_p, THREADS=256, PER_THREAD=32, SMEM_PER_THREAD=32, MAX_CLUSTER=8):
    return _run(logits, top_p, THREADS, PER_THREAD, SMEM_PER_THREAD, MAX_CLUSTER)[0]


def order_keys(x):
    """The kernel's order-preserving keys of fp32 logits, as int64 (-0.0 and +0.0 share one)."""
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    bits = torch.where(bits == 0x80000000, 0, bits)
    return torch.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits | 0x80000000)


def nucleus_mask(logits, top_p, THREADS=256, PER_THREAD=32, SMEM_PER_THREAD=32, MAX_CLUSTER=8):
    """(tokens, mask [B, V] bool): one call and the nucleus it drew from (keys at or above the row's cut,
    without the -inf logits, whose mass is zero and which are never drawn). For tests."""
    tokens, cuts = _run(logits, top_p, THREADS, PER_THREAD, SMEM_PER_THREAD, MAX_CLUSTER)
    return tokens, (order_keys(logits) >= cuts[:, None]) & (logits > float("-inf"))
