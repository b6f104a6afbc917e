"""Decode attention in CUDA C++ for few sequences: the copy engine streams the cache into shared memory,
the tensor cores do the math, and the pieces of a context merge inside one thread-block cluster instead of
in a second kernel.

The idea: split-K (triton_split_k.py) needs pieces of the context on many SMs when a batch has few
sequences, and pays for them twice: a second kernel merges the pieces through an fp32 workspace in global
memory (2.5 us at B = 1, L = 4096 on the H200), and each piece's program keeps few bytes in flight (three
programs an SM by shared memory, 12.5% occupancy; ncu, 2026-11-30). Here the pieces of one (sequence, kv
head) are the blocks of one cluster (sm_90; up to 16 blocks with the non-portable size, which B = 1 with 8
kv heads would need to fill 128 of the H200's 132 SMs; MAX_CLUSTER caps it, at 8 by default, which measured
faster and steadier, see below):

* Loads: a producer warp's one thread asks the copy engine (cp.async.bulk, completing on an mbarrier)
  for tiles of TILE positions of keys and values, one contiguous copy each (a head's rows are contiguous
  in the cache), STAGES tiles ahead of the slowest consumer warp (an "empty" mbarrier per stage). The
  first STAGES tiles go out before the row's length has arrived, as if the row filled the cache.
* Math: CONSUMERS warps take 16-position slabs of each tile in turn. Scores are one m16n8k16 mma per 8
  positions and 16 columns, the group's query heads as rows 0-7 of the 16 (Q stays bf16, exact; the
  scale goes on the fp32 scores), P.V the same with P rounded to bf16 as every flash kernel does. Each
  warp keeps its own online softmax (base 2, ex2.approx) and fp32 accumulator.
* Shared-memory reads without a swizzle: the tiles land as the cache lays them, 256-byte rows, where
  ldmatrix's 8 rows at one column would share a bank (8-way conflicts; twice as slow at L = 32768). Each
  lane instead reads 16 bytes of a row itself. A dot product takes its columns in any order, so the k steps
  of Q.K^T use the columns those reads give (Q is loaded in the same order), and for P.V each read word is
  one lane's part of an 8 x 8 matrix that `movmatrix` transposes into the B operand; the output columns
  come out permuted and are put back in place when the warps hand them to the merge. Lanes of odd rows
  read a row's 64-byte parts in the other order, so a quarter warp's 8 reads hit 8 different bank groups.
* Merges: the warps of a block merge through shared memory (the ring, free after the loop), then the
  blocks of a cluster through distributed shared memory: each block normalizes a slice of the outputs
  from every block's (max, sum, accumulator). Nothing goes through global memory but the output.

Pieces per (sequence, kv head): the most that keep all blocks in one wave and every cluster resident at
once (cudaOccupancyMaxActiveClusters: a 16-block cluster needs 16 free SMs in one GPC), at most
MAX_CLUSTER; with 17 or more pairs on 132 SMs a block takes a whole context and no cluster is used.

Where the Triton split-K seed takes over (same file, so a run keeps one candidate for every shape): head
sizes other than 64 and 128, more than 8 query heads per kv head (DeepSeek's MLA: 128 heads over one
latent of 576), values narrower than keys, rows not on 16 bytes, a head's rows not contiguous (a
[B, L, Hkv, D] cache seen as [B, Hkv, L, D]), and more than SPLIT_K_PAIRS_PER_SM (sequence, kv head)
pairs per SM.
CONSUMERS, TILE and STAGES are -D defines: each is one cached build (ratchet.cuda_build); MAX_CLUSTER is a
launch setting.

On the H200 (2026-12-01, `python -m benchmarks.probes.eval_seeds --tasks decode_attention --seeds cuda_cluster
triton_split_k --repeats 1`, judged, one run; docs/results/2026-12-01-decode-attention-judged.md): B = 1,
Llama-3-8B heads, L = 4096 / 32768 / 131072: 13.50 / 42.26 / 139.92 us against split-K's 13.73 / 50.27 /
154.59; slower than split-K at B = 8, L = 32768 (170.1 against 165.9) and at 70B's B = 1, L = 4096 (14.08
against 13.58). Two versions before this one lost to split-K everywhere: CUDA-core math (shuffles; 90 us at L
= 32768) and mma over one 256-byte bulk copy a row into padded rows (235 us; the same math over the swizzled
tile copies took 45.9).

Later on 2026-12-01 (decode read floor; docs/results/2026-12-01-decode-attention-cluster-caps.md, graph
replays after the judge's flush): the tiles came as 64-column boxes of a tensor map in the 128-byte swizzle,
read by ldmatrix. With the math taken out, those boxes streamed L = 32768 in 41.0 us and one bulk copy a tile
in 37.1; a bulk read of the same bytes with nothing else takes 32.9, and of L = 4096's 8.1 (so 8 us there is
out of reach under the protocol). One box a tile over a 5-d view (whole 256-byte rows, swizzled) gained 1%.
This version, bulk copies with lane reads and movmatrix: 13.22 / 38.62 / 126.11 us at B = 1, L = 4096 / 32768
/ 131072, against 13.41 / 41.57 / 138.93 for the boxes in the same run; 1-6% faster at B = 8 and 64 and for
70B's heads; D = 64 1% slower. Where the time goes at L = 32768 (switches in a copy of this source): without
the cluster merge 1.9 us less, without the math 1.8 less, without both 35.3 against the 32.9 of a bare read. A
merge by pushes (each block writes the others' slices into their shared memory and arrives on their mbarrier,
no cluster barrier at the end) was 0-5% slower.

MAX_CLUSTER 8 is the default since 2026-12-01 (decode read floor; judged on one machine): 13.12 / 38.99 / 128.27 us at
B = 1, L = 4096 / 32768 / 131072 against 13.31 / 43.09 / 145.30 with 16, within 1% of 16 elsewhere. 16 is
the less predictable: 39.4 and 125.9 on one machine, 43.1 and 145.3 on another; 8 gave 38.6-39.0 on
both machines where it was measured. The first judged run (2026-12-01, decode attention
clusters) had found 16 better with the tensor-map boxes.
"""

import functools

import torch

from ratchet.cuda_build import load_cached
from ratchet.tasks.decode_attention.seeds import triton_split_k

SPACE = {"CONSUMERS": [8, 4], "TILE": [128, 64, 32], "STAGES": [3, 4, 6], "MAX_CLUSTER": [8, 16]}
# The ring fits an sm_90 block's 227 KB of shared memory at D = 128 (TILE x 512 bytes a stage; shared_bytes).
CONSTRAINTS = ["TILE * STAGES <= 384"]

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

at::Tensor decode(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor lens, int64_t max_cluster, int64_t sms);
"""

CUDA_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

namespace cg = cooperative_groups;

// Internal linkage: every config is its own module, and a symbol shared across modules (a template's
// static local is one GNU_UNIQUE symbol) would let one config's launch settings leak into another's.
namespace {

constexpr int kConsumers = CFG_CONSUMERS;  // warps that do the math; one more warp asks for the copies
constexpr int kThreads = 32 * (kConsumers + 1);
constexpr int kTile = CFG_TILE;  // positions a stage
constexpr int kStages = CFG_STAGES;
constexpr int kSlab = 16;  // positions a warp takes at once: the k of one P.V mma
constexpr int kRows = 8;  // query heads a kv head may have: rows 0-7 of the mma's 16 (8-15 stay zero)
constexpr int kMaxCluster = 16;
static_assert(kTile % kSlab == 0, "TILE must be a multiple of 16 positions");

struct Params {
  const uint16_t* k;  // [B, Hkv, L, D] bf16 bits, each head's rows contiguous (stride D)
  const uint16_t* v;
  int64_t skb, skh, svb, svh;  // batch and head strides, in elements
  const uint16_t* q;  // bf16 bits
  const int* lens;
  uint16_t* out;
  int64_t sqb, sqh, sob, soh;
  int hkv, heads, chunk, L;
  float qscale;  // 1/sqrt(D) * log2(e): scores in base 2
};

// A stage holds the keys, then the values, of TILE positions: [TILE][D] bf16 each, as one bulk copy lays
// them (the cache's rows are contiguous). No swizzle: the math reads 16 bytes a lane (ld_row) in an order
// that keeps a quarter warp on 8 different bank groups.
template <int D>
struct Layout {
  static constexpr int kHalfBytes = kTile * D * 2;  // a tile's keys (or values): TILE rows of D bf16
  static constexpr int kStageBytes = 2 * kHalfBytes;
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kPartBytes = kConsumers * kRows * D * 4;
  static constexpr int kRegion = kRingBytes > kPartBytes ? kRingBytes : kPartBytes;
  // 1024 bytes of slack: the ring starts on a 1024-byte boundary.
  static constexpr int kSmem = 1024 + kRegion + 4 * (kRows * D + 2 * kRows + 2 * kConsumers * kRows) + 16 * kStages;
  static_assert(D % 64 == 0 && D <= 256, "head size: a multiple of 64, at most 256");
  // An sm_90 block's limit: a config past it is a build error here, not a failed launch.
  static_assert(kSmem <= 232448, "TILE x STAGES needs more shared memory than an sm_90 block has");
};

// Byte offset of (row r, column d) in a stage's keys or values (d < D).
template <int D>
__device__ __forceinline__ uint32_t row_at(int r, int d) {
  return r * (D * 2) + d * 2;
}

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred ready;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n"
      "@!ready bra WAIT;\n"
      "}\n" ::"r"(shared_addr(bar)),
      "r"(parity)
      : "memory");
}

// The copy engine moves `bytes` contiguous bytes from global memory into shared memory and counts them on `bar`.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(shared_addr(bar))
               : "memory");
}

// 16 bytes of shared memory into four registers.
__device__ __forceinline__ void ld_row(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)
               : "memory");
}

// The transpose of an 8 x 8 bf16 matrix held as an mma fragment (lane 4g + t: row g, columns 2t and 2t + 1).
__device__ __forceinline__ uint32_t transposed(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// c += a . b on the tensor cores (bf16 in, fp32 accumulate); a's rows 8-15 (a1, a3) are always zero here.
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {  // round to nearest even, lo in the low half
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x without exp2f's denormal fix-up; volatile so that nvcc does not hoist it (see the top-p seed).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint16_t to_bf16(float x) {  // round to nearest even (outputs are finite)
  const uint32_t bits = __float_as_uint(x);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

template <int D>
__global__ void __launch_bounds__(kThreads) decode_cluster(const __grid_constant__ Params p) {
  using S = Layout<D>;
  constexpr int kSteps = D / 16;  // k steps of Q.K^T, and pairs of 8-wide n tiles of P.V
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - shared_addr(smem_raw) % 1024) % 1024);
  const uint32_t ring = shared_addr(smem);  // STAGES x (keys, values) x boxes, as shared-memory addresses
  float* parts = reinterpret_cast<float*>(smem);  // after the loop: [warps][8][D] accumulators
  float* blk_acc = reinterpret_cast<float*>(smem + S::kRegion);  // [8][D], read by the whole cluster
  float* blk_m = blk_acc + kRows * D;
  float* blk_s = blk_m + kRows;
  float* st_m = blk_s + kRows;  // [warps][8]: each warp's max, then its weight
  float* st_s = st_m + kConsumers * kRows;
  uint64_t* full = reinterpret_cast<uint64_t*>(st_s + kConsumers * kRows);
  uint64_t* empty = full + kStages;

  const int rank = blockIdx.x;  // the cluster spans the grid's x extent
  const int pieces = gridDim.x;
  const int64_t b = blockIdx.y / p.hkv, kvh = blockIdx.y % p.hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool producer = threadIdx.x == 32 * kConsumers;
  const int lo = rank * p.chunk;
  const int whole = min(lo + p.chunk, p.L);  // the piece's end if its row is the whole cache

  // The producer asks for tile t: its keys and values, one bulk copy each, up to the cache's end (the rows
  // of a short last tile keep what the stage held before: the math never uses them).
  auto issue = [&](int t_) {
    const int stage = t_ % kStages;
    const uint32_t kdst = ring + stage * S::kStageBytes;
    const int first = lo + t_ * kTile;
    const uint32_t bytes = static_cast<uint32_t>(min(kTile, p.L - first)) * (D * 2);
    mbar_expect(&full[stage], 2 * bytes);
    bulk_load(kdst, p.k + b * p.skb + kvh * p.skh + static_cast<int64_t>(first) * D, bytes, &full[stage]);
    bulk_load(kdst + S::kHalfBytes, p.v + b * p.svb + kvh * p.svh + static_cast<int64_t>(first) * D, bytes,
              &full[stage]);
  };
  // The first STAGES tiles go out before the row's length is known, as if the row filled the cache: the
  // length's own load (a DRAM round trip after the judge's L2 flush) then overlaps them. A row that turns
  // out shorter wastes at most those tiles' reads.
  const int guessed = whole > lo ? min(kStages, (whole - lo + kTile - 1) / kTile) : 0;
  if (producer) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int t_ = 0; t_ < guessed; ++t_) issue(t_);
  }
  const int seq = p.lens[b];
  const int hi = min(whole, seq);  // a length past the cache reads no further
  const int tiles = hi > lo ? (hi - lo + kTile - 1) / kTile : 0;
  __syncthreads();

  float o[2 * kSteps][4];  // [8 heads (rows 0-7) x D] of this warp: n tile j, column 2t + i is value column
                           // 32 (j / 4) + 8t + 2 (j % 4) + i (the P.V loop says why)
  float m = -INFINITY, l = 0.0f;  // row g's running max (base 2) and this lane's share of its sum
  const int g = lane / 4, t = lane % 4;  // the mma's row group and thread-in-group
  if (warp == kConsumers) {
    // The producer: the rest of the tiles, STAGES ahead of the slowest consumer warp; then it waits for
    // guessed tiles past the row's end, which no one reads, so that no copy lands after the block is gone.
    if (producer) {
      for (int t_ = guessed; t_ < tiles; ++t_) {
        const int stage = t_ % kStages;
        if (t_ >= kStages) mbar_wait(&empty[stage], ((t_ / kStages) - 1) & 1);
        issue(t_);
      }
      for (int t_ = tiles; t_ < guessed; ++t_) mbar_wait(&full[t_], 0);
    }
  } else {
    // A dot product may take its columns in any order, so each k step of Q.K^T takes the columns that one
    // 16-byte read of a key row gives a lane: k step 2u + e, k = 2t + i (+ 8) is column 32u + 8t + 4e + i (+ 2).
    // Q as the mma's A operand in that order, rows = the group's heads: a0 = (row g, k 2t, 2t+1),
    // a2 = (row g, k 2t+8, +9).
    uint32_t qa[kSteps][2];
    const bool head = g < p.heads;
    const uint16_t* qrow = p.q + b * p.sqb + (kvh * p.heads + g) * p.sqh;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint16_t* col = qrow + 32 * (ks / 2) + 8 * t + 4 * (ks % 2);
      qa[ks][0] = head ? *reinterpret_cast<const uint32_t*>(col) : 0u;
      qa[ks][1] = head ? *reinterpret_cast<const uint32_t*>(col + 2) : 0u;
    }
#pragma unroll
    for (int j = 0; j < 2 * kSteps; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    constexpr int kSlabs = kTile / kSlab;
    constexpr int kReads = D / 32;  // 16-byte reads a lane makes of one row: 4 lanes cover 32 columns a read
    // Lanes of odd rows read a row's 64-byte parts in the order 1, 0, 3, 2, ...: the 8 lanes of a quarter warp
    // (rows g and g + 1) then reach 8 different 16-byte bank groups. `odd` picks the part back.
    const bool odd = g & 1;
    for (int t_ = 0; t_ < tiles; ++t_) {
      const int stage = t_ % kStages;
      mbar_wait(&full[stage], (t_ / kStages) & 1);
      const uint32_t ktile = ring + stage * S::kStageBytes;
      const uint32_t vtile = ktile + S::kHalfBytes;
      const int first = lo + t_ * kTile;
      // Slabs are dealt to the warps round-robin across tiles: with fewer slabs a tile than warps, every
      // warp still gets its share.
      const int own = ((warp - t_ * kSlabs) % kConsumers + kConsumers) % kConsumers;
      for (int slab = own; slab < kSlabs; slab += kConsumers) {
        const int base = first + slab * kSlab;  // the slab's first position
        if (base >= hi) break;
        const int row0 = slab * kSlab;  // its first row in the tile
        if (base + kSlab > hi) {
          // The piece ends inside this slab: its value rows past the end hold whatever the cache holds
          // there (0 x NaN is NaN in the mma): zero them. Only the last tile has such rows, and it is not
          // refilled, so the copy engine never writes them after this.
          for (int i = lane; i < kSlab * (D / 8); i += 32) {
            const int r = row0 + i / (D / 8), c = i % (D / 8);
            if (first + r >= hi) {
              const uint32_t at = vtile + row_at<D>(r, 8 * c);
              asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0u) : "memory");
            }
          }
          __syncwarp();
        }
        // Scores: two n tiles of 8 positions; sc[j] = (row g, positions base + 8j + 2t, +1) in c0, c1. Lane
        // (g, t) reads key row 8j + g, columns 32u + 8t .. + 7: words 0-1 are b0-b1 of k step 2u, 2-3 of 2u + 1.
        float sc[2][4] = {};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t kr[kReads][4];  // kr[x] holds part x ^ odd
          const uint32_t krow = ktile + row_at<D>(row0 + 8 * j + g, 8 * t);
#pragma unroll
          for (int x = 0; x < kReads; ++x) ld_row(krow + 64 * (x ^ odd), kr[x]);
#pragma unroll
          for (int u = 0; u < kReads; ++u) {
            uint32_t w[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) w[c] = odd ? kr[u ^ 1][c] : kr[u][c];
            mma(sc[j], qa[2 * u][0], qa[2 * u][1], w[0], w[1]);
            mma(sc[j], qa[2 * u + 1][0], qa[2 * u + 1][1], w[2], w[3]);
          }
        }
        float top = m;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float x = sc[j][e] * p.qscale;
            sc[j][e] = base + 8 * j + 2 * t + e < hi ? x : -INFINITY;  // stale keys: -inf by selection
            top = fmaxf(top, sc[j][e]);
          }
        }
        top = fmaxf(top, __shfl_xor_sync(0xFFFFFFFFu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xFFFFFFFFu, top, 2));
        const float shift = top == -INFINITY ? 0.0f : top;  // nothing seen yet: every weight is 0
        const float alpha = ex2(m - shift);
        m = top;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          sc[j][0] = ex2(sc[j][0] - shift);
          sc[j][1] = ex2(sc[j][1] - shift);
          sum += sc[j][0] + sc[j][1];
        }
        l = l * alpha + sum;
        // P as the A operand: (row g, positions 2t, 2t+1) and (row g, positions 8 + 2t, +1), rounded to bf16.
        const uint32_t pa0 = pack_bf16(sc[0][0], sc[0][1]);
        const uint32_t pa2 = pack_bf16(sc[1][0], sc[1][1]);
        // P.V: lane (g, t) reads value rows g and 8 + g, columns 32u + 8t .. + 7. Word c of that read is lane
        // (g, t)'s part of an 8 x 8 matrix M (rows: positions, column 2t + i: value column 32u + 8t + 2c + i);
        // its transpose is the B operand of output tile 4u + c, whose column 2t + i is value column
        // 32u + 8t + 2c + i.
        uint32_t vr[2][kReads][4];  // vr[h][x] holds part x ^ odd of row 8h + g
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t vrow = vtile + row_at<D>(row0 + 8 * h + g, 8 * t);
#pragma unroll
          for (int x = 0; x < kReads; ++x) ld_row(vrow + 64 * (x ^ odd), vr[h][x]);
        }
#pragma unroll
        for (int u = 0; u < kReads; ++u) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int j = 4 * u + c;
            const uint32_t b0 = transposed(odd ? vr[0][u ^ 1][c] : vr[0][u][c]);
            const uint32_t b1 = transposed(odd ? vr[1][u ^ 1][c] : vr[1][u][c]);
            o[j][0] *= alpha;
            o[j][1] *= alpha;
            mma(o[j], pa0, pa2, b0, b1);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[stage]);
    }
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
  }

  // The block's warps merge: each writes its state, then weights exp2(m_warp - m_block).
  __syncthreads();
  if (warp < kConsumers) {
    if (t == 0) {
      st_m[warp * kRows + g] = m;
      st_s[warp * kRows + g] = l;
    }
#pragma unroll
    for (int j = 0; j < 2 * kSteps; ++j) {
      *reinterpret_cast<float2*>(parts + (warp * kRows + g) * D + 32 * (j / 4) + 8 * t + 2 * (j % 4)) =
          make_float2(o[j][0], o[j][1]);
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int h = threadIdx.x;
    float top = -INFINITY;
    for (int w = 0; w < kConsumers; ++w) top = fmaxf(top, st_m[w * kRows + h]);
    const float shift = top == -INFINITY ? 0.0f : top;
    float sum = 0.0f;
    for (int w = 0; w < kConsumers; ++w) {
      const float wt = ex2(st_m[w * kRows + h] - shift);
      st_m[w * kRows + h] = wt;
      sum += st_s[w * kRows + h] * wt;
    }
    blk_m[h] = top;
    blk_s[h] = sum;
  }
  __syncthreads();
  const int outputs = p.heads * D;  // [heads][D] of this (sequence, kv head), h-major as blk_acc
  for (int e = threadIdx.x; e < outputs; e += kThreads) {
    const int h = e / D, d = e % D;
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumers; ++w) a = fmaf(parts[(w * kRows + h) * D + d], st_m[w * kRows + h], a);
    blk_acc[e] = a;
  }

  uint16_t* out = p.out + b * p.sob + kvh * p.heads * p.soh;
  if (pieces == 1) {
    __syncthreads();
    for (int e = threadIdx.x; e < outputs; e += kThreads) {
      const int h = e / D, d = e % D;
      out[h * p.soh + d] = to_bf16(blk_acc[e] / blk_s[h]);
    }
    return;
  }
  // The pieces merge: block `rank` normalizes its slice of the outputs from every block's state.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int per = (outputs + pieces - 1) / pieces;
  const int end = min(outputs, (rank + 1) * per);
  for (int e = rank * per + threadIdx.x; e < end; e += kThreads) {
    const int h = e / D, d = e % D;
    float mr[kMaxCluster];
    float top = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      mr[r] = r < pieces ? cluster.map_shared_rank(blk_m, r)[h] : -INFINITY;
      top = fmaxf(top, mr[r]);
    }
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < pieces) {
        const float w = ex2(mr[r] - top);  // an empty piece: -inf, weight 0 (piece 0 is never empty)
        num = fmaf(cluster.map_shared_rank(blk_acc, r)[e], w, num);
        den = fmaf(cluster.map_shared_rank(blk_s, r)[h], w, den);
      }
    }
    out[h * p.soh + d] = to_bf16(num / den);
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
}

struct Occupancy {
  int per_sm = 0;                      // blocks an SM holds
  int clusters[kMaxCluster + 1] = {};  // clusters of each size that can run at once
};

template <int D>
const Occupancy& occupancy() {
  // Once per instantiation and module (internal linkage); a process's calls share one device kind.
  static Occupancy occ;
  static std::once_flag once;
  std::call_once(once, [] {
    auto kernel = decode_cluster<D>;
    const int smem = Layout<D>::kSmem;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ.per_sm, kernel, kThreads, smem));
    for (int c = 2; c <= kMaxCluster; ++c) {
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = c;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(c, 1, 1);
      cfg.blockDim = dim3(kThreads, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      if (cudaOccupancyMaxActiveClusters(&occ.clusters[c], kernel, &cfg) != cudaSuccess) occ.clusters[c] = 0;
      (void)cudaGetLastError();  // a refused query leaves an error that the next launch must not see
    }
  });
  return occ;
}

template <int D>
void run(Params p, int64_t pairs, int64_t max_cluster, int64_t sms, cudaStream_t stream) {
  const Occupancy& occ = occupancy<D>();
  TORCH_CHECK(occ.per_sm > 0, "decode_attention: a block of this config does not fit an SM");
  // Pieces per (sequence, kv head): the most that keep every block in one wave and every cluster resident
  // at once (a 16-block cluster needs 16 free SMs in one GPC), at least one tile each.
  int64_t pieces = 1;
  for (int64_t c = std::min<int64_t>(max_cluster, kMaxCluster); c >= 2; --c) {
    if (c * pairs <= occ.per_sm * sms && pairs <= occ.clusters[c] && (c - 1) * kTile < p.L) {
      pieces = c;
      break;
    }
  }
  p.chunk = static_cast<int>(((p.L + pieces - 1) / pieces + kTile - 1) / kTile * kTile);
  pieces = (p.L + p.chunk - 1) / p.chunk;  // no piece past L
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(pieces);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(pieces), static_cast<unsigned>(pairs), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = Layout<D>::kSmem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = pieces > 1 ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_cluster<D>, p));
}

}  // namespace

at::Tensor decode(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor lens, int64_t max_cluster, int64_t sms) {
  // The Python side checked dtypes, devices, head and group sizes and alignment.
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), Hkv = k.size(1);
  at::Tensor out = at::empty({B, Hq, D}, q.options());
  if (B == 0 || Hq == 0) return out;
  Params p;
  p.k = reinterpret_cast<const uint16_t*>(k.data_ptr());
  p.v = reinterpret_cast<const uint16_t*>(v.data_ptr());
  p.skb = k.stride(0); p.skh = k.stride(1);
  p.svb = v.stride(0); p.svh = v.stride(1);
  p.q = reinterpret_cast<const uint16_t*>(q.data_ptr());
  p.lens = lens.data_ptr<int>();
  p.out = reinterpret_cast<uint16_t*>(out.data_ptr());
  p.sqb = q.stride(0); p.sqh = q.stride(1);
  p.sob = out.stride(0); p.soh = out.stride(1);
  p.hkv = static_cast<int>(Hkv);
  p.heads = static_cast<int>(Hq / Hkv);
  p.chunk = 0;
  p.L = static_cast<int>(k.size(2));
  p.qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t pairs = B * Hkv;
  if (D == 128) run<128>(p, pairs, max_cluster, sms, stream);
  else run<64>(p, pairs, max_cluster, sms, stream);
  return out;
}
"""

HEAD_SIZES = (64, 128)
MAX_GROUP = 8  # query heads a kv head may have: rows 0-7 of the mma's 16
# Batches with more (sequence, kv head) pairs than this many per SM go to split-K: each block here holds
# its SM alone (shared memory), so many short rows queue their prologues one after another. On the H200
# (2026-12-01, decode attention clusters) this kernel took 144 us at B = 64, L = 4096 (512 pairs) against
# split-K's 152, and 171 at B = 256, L = 1024 (2048 pairs) against 156.
SPLIT_K_PAIRS_PER_SM = 4
# Bytes of shared memory a block may have on sm_90, and the kernel's own use beside the ring (Layout).
_SHARED_PER_BLOCK = 232448


def shared_bytes(CONSUMERS, TILE, STAGES, D=128, rows=MAX_GROUP):
    """What Layout<D>::kSmem asks for: the ring (or the warps' partial sums), the block's sums, barriers."""
    ring = STAGES * 2 * (D // 64) * TILE * 128
    parts = CONSUMERS * rows * D * 4
    return 1024 + max(ring, parts) + 4 * (rows * D + 2 * rows + 2 * CONSUMERS * rows) + 16 * STAGES


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _aligned(t):
    """Rows start on 16 bytes (the base and every stride but the last, unit one, are positive multiples of 8
    bf16), as the copy engine's bulk copies need."""
    return t.data_ptr() % 16 == 0 and all(st > 0 and st % 8 == 0 for st in t.stride()[:-1])


def takes(q, k_cache, v_cache, seq_lens):
    """Whether the CUDA kernel's layout takes these inputs (on any device); the rest go to split-K."""
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    return (q.dtype == k_cache.dtype == v_cache.dtype == torch.bfloat16 and seq_lens.dtype == torch.int32
            and 0 < k_cache.shape[2] < 2**31 and D in HEAD_SIZES and v_cache.shape == k_cache.shape
            and Hkv > 0 and Hq % Hkv == 0
            and Hq // Hkv <= MAX_GROUP and q.stride(-1) == k_cache.stride(-1) == v_cache.stride(-1) == 1
            and k_cache.stride(2) == v_cache.stride(2) == D  # a tile of a head's rows is one bulk copy
            and all(_aligned(t) for t in (q, k_cache, v_cache)))


def kernel(q, k_cache, v_cache, seq_lens, CONSUMERS=8, TILE=128, STAGES=3, MAX_CLUSTER=8):
    # The build comes first: without a CUDA toolkit the first call is a build error (compile_error to the
    # judge), as for the other CUDA seeds.
    module = load_cached("ratchet_decode_cluster", CUDA_SRC, CPP_SRC, ["decode"],
                         defines={"CFG_CONSUMERS": CONSUMERS, "CFG_TILE": TILE, "CFG_STAGES": STAGES},
                         no_implicit_headers=True)
    sms = _sm_count(q.device.index if q.device.index is not None else torch.cuda.current_device()) \
        if q.is_cuda else 0
    if not (q.is_cuda and takes(q, k_cache, v_cache, seq_lens)
            and q.shape[0] * k_cache.shape[1] <= SPLIT_K_PAIRS_PER_SM * sms):
        return triton_split_k.kernel(q, k_cache, v_cache, seq_lens)
    return module.decode(q, k_cache, v_cache, seq_lens.contiguous(), MAX_CLUSTER, sms)
