"""RMSNorm in CUDA C++ (torch's cpp_extension): one block per row, 16-byte accesses, fp32 math.

Each block takes a row (the grid loops if there are more rows than blocks): pass 1 sums the squares
(per-thread fp32 partial sums, then warp shuffles and one shared-memory step across warps), pass 2
writes x * rstd * weight rounded once to x's dtype. The second pass finds the row in L1/L2 (an 8192-wide
bf16 row is 16 KB), so DRAM sees x once.

Accesses are 16 bytes (8 bf16/fp16 or 4 fp32 values) wherever they can be: x and out from each row's
first 16-byte boundary, with a scalar head and tail around the aligned body, so odd H (3003) still
moves most of the row in vectors; weight by 16 bytes only when every row starts aligned
(H % (16 / element size) == 0), else one value at a time (it stays in L1 across rows).

On Hopper (sm_90) with L2_HINTS=1, accesses carry L2 eviction priorities (createpolicy and
.L2::cache_hint, which Triton's loads do not offer per access): weight evict_last, since every row
reads it; the last read of x and the write of out evict_first, since no one reads them again here.
The instructions exist since sm_80 but are only turned on where this seed is measured; every other
arch, and L2_HINTS=0, takes plain loads and stores, so the measurement says whether hints pay.

THREADS and L2_HINTS reach the source as -D defines; each config is its own cached build
(ratchet.cuda_build): the first call of a config compiles it (nvcc: ~20 s on 2 cores here), later calls
and later evaluations load it.
"""

from ratchet.cuda_build import FLOAT_CONVERSIONS, load_cached

SPACE = {"THREADS": [256, 512, 128, 1024], "L2_HINTS": [1, 0]}

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

at::Tensor rmsnorm(at::Tensor x, at::Tensor weight, double eps);
"""

CUDA_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#ifndef CFG_THREADS
#define CFG_THREADS 256
#endif
#ifndef CFG_L2_HINTS
#define CFG_L2_HINTS 1
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && CFG_L2_HINTS
#define RN_L2_HINTS 1
#else
#define RN_L2_HINTS 0
#endif

namespace {

constexpr int kThreads = CFG_THREADS;
static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "THREADS: a multiple of 32 up to 1024");
""" + FLOAT_CONVERSIONS + r"""
// 16 bytes of T: the unit of the vectorized accesses.
template <typename T> struct alignas(16) Vec16 { T v[16 / sizeof(T)]; };

// L2 eviction priorities (opaque 64-bit policies); zeros and unused without hints.
struct Policies { uint64_t keep, stream; };

__device__ __forceinline__ Policies make_policies() {
  Policies p{0, 0};
#if RN_L2_HINTS
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p.keep));
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p.stream));
#endif
  return p;
}

// Plain loads go through the read-only path (__ldg: ld.global.nc) explicitly: with inline PTX in the
// kernel the compiler stops choosing it by itself.
template <typename T> __device__ __forceinline__ Vec16<T> load16(const T* ptr) {
  const uint4 q = __ldg(reinterpret_cast<const uint4*>(ptr));
  Vec16<T> r;
  memcpy(&r, &q, 16);
  return r;
}

// x and weight are never written while the kernel runs: the hinted load needs no memory clobber.
template <typename T> __device__ __forceinline__ Vec16<T> load16(const T* ptr, uint64_t policy) {
#if RN_L2_HINTS
  uint4 q;
  asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(ptr), "l"(policy));
  Vec16<T> r;
  memcpy(&r, &q, 16);
  return r;
#else
  return load16(ptr);
#endif
}

// One 16-byte store either way: through an intrinsic, since a plain uint4 store was split into
// 4- and 2-byte stores by nvcc 13 (seen in the PTX).
// No memory clobber: nothing in the kernel reads out.
template <typename T> __device__ __forceinline__ void store16(T* ptr, const Vec16<T>& v, uint64_t policy) {
  uint4 q;
  memcpy(&q, &v, 16);
#if RN_L2_HINTS
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               :: "l"(ptr), "r"(q.x), "r"(q.y), "r"(q.z), "r"(q.w), "l"(policy));
#else
  __stwb(reinterpret_cast<uint4*>(ptr), q);
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The block's total, returned to every thread. Safe to call once per row in a loop: each thread
// reads `total` before it reaches the next call's first __syncthreads, after which warp 0 writes it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kThreads / 32 ? partial[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// vec_x: x and out are 16-byte aligned at the same offsets (their bases are), so each row has an
// aligned body. vec_w: also every row starts aligned and weight is aligned, so weight goes by 16 bytes.
template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          T* __restrict__ out, int64_t rows, int64_t H,
                                                          float eps, bool vec_x, bool vec_w) {
  constexpr int kV = 16 / sizeof(T);
  const Policies pol = make_policies();
  const int tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * H;
    T* orow = out + row * H;
    // Elements [0, head) and [tail, H) one by one; [head, tail) as nvec vectors of kV.
    int64_t head = 0, nvec = 0;
    if (vec_x) {
      head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(xr) % 16) % 16 / sizeof(T));
      head = head < H ? head : H;
      nvec = (H - head) / kV;
    }
    const int64_t tail = head + nvec * kV;

    float ss = 0.f;
    for (int64_t j = tid; j < head; j += kThreads) { const float f = to_float(__ldg(xr + j)); ss += f * f; }
    for (int64_t i = tid; i < nvec; i += kThreads) {
      const Vec16<T> p = load16(xr + head + i * kV);
#pragma unroll
      for (int k = 0; k < kV; ++k) { const float f = to_float(p.v[k]); ss += f * f; }
    }
    for (int64_t j = tail + tid; j < H; j += kThreads) { const float f = to_float(__ldg(xr + j)); ss += f * f; }
    const float rstd = rsqrtf(block_sum(ss) / static_cast<float>(H) + eps);

    for (int64_t j = tid; j < head; j += kThreads) {
      orow[j] = from_float<T>(to_float(__ldg(xr + j)) * rstd * to_float(__ldg(w + j)));
    }
    for (int64_t i = tid; i < nvec; i += kThreads) {
      const int64_t j0 = head + i * kV;
      const Vec16<T> xv = load16(xr + j0, pol.stream);
      Vec16<T> wv;
      if (vec_w) {
        wv = load16(w + j0, pol.keep);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) wv.v[k] = __ldg(w + j0 + k);
      }
      Vec16<T> o;
#pragma unroll
      for (int k = 0; k < kV; ++k) o.v[k] = from_float<T>(to_float(xv.v[k]) * rstd * to_float(wv.v[k]));
      store16(orow + j0, o, pol.stream);
    }
    for (int64_t j = tail + tid; j < H; j += kThreads) {
      orow[j] = from_float<T>(to_float(__ldg(xr + j)) * rstd * to_float(__ldg(w + j)));
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
void launch(const at::Tensor& x, const at::Tensor& w, at::Tensor& out, float eps, cudaStream_t stream) {
  const int64_t rows = x.size(0), H = x.size(1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* wp = static_cast<const T*>(w.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const bool vec_x = aligned16(xp) && aligned16(op);
  const bool vec_w = vec_x && H % (16 / sizeof(T)) == 0 && aligned16(wp);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, INT32_MAX));
  rmsnorm_kernel<T><<<grid, kThreads, 0, stream>>>(xp, wp, op, rows, H, eps, vec_x, vec_w);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor rmsnorm(at::Tensor x, at::Tensor weight, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.device() == x.device(), "x and weight must be on one CUDA device");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1), "expects x [T, H], weight [H]");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight must have x's dtype");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor out = at::empty_like(xc);
  if (xc.numel() == 0) return out;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const float e = static_cast<float>(eps);
  switch (xc.scalar_type()) {
    case at::kFloat: launch<float>(xc, wc, out, e, stream); break;
    case at::kHalf: launch<__half>(xc, wc, out, e, stream); break;
    case at::kBFloat16: launch<__nv_bfloat16>(xc, wc, out, e, stream); break;
    default: TORCH_CHECK(false, "rmsnorm: bf16, fp16 or fp32, not ", xc.scalar_type());
  }
  return out;
}
"""


def kernel(x, weight, eps, THREADS=256, L2_HINTS=1):
    module = load_cached("ratchet_rmsnorm_cuda", CUDA_SRC, CPP_SRC, ["rmsnorm"],
                         defines={"CFG_THREADS": THREADS, "CFG_L2_HINTS": L2_HINTS}, no_implicit_headers=True)
    return module.rmsnorm(x, weight, float(eps))
