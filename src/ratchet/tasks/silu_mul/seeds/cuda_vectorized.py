"""SiLU-and-multiply in CUDA C++ (torch's cpp_extension): 16-byte chunks, fp32 math, one rounding.

The grid is 2D: blockIdx.y walks rows (looping past 65535), blockIdx.x covers a row's chunks, and each
thread handles UNROLL chunks THREADS apart, issuing all their loads before any math so that several
16-byte loads per thread are in flight. out = gate / (1 + exp(-gate)) * up in fp32, rounded once to
x's dtype.

A chunk is 16 bytes (8 bf16/fp16 or 4 fp32 values) when I is a multiple of that and x and out are
16-byte aligned: then gate, up and out rows all start aligned. Otherwise (odd I: the up half starts at
an odd column, so gate, up and out are misaligned by different amounts) a chunk is one value, loaded
and stored on its own.

On Hopper (sm_90) with L2_HINTS=1 the 16-byte accesses carry an L2 evict_first priority
(createpolicy and .L2::cache_hint; Triton's loads offer no per-access policy object): every byte is
touched once, so the stream should not push out of L2 what the rest of the model step still wants.
The instructions exist since sm_80 but are only turned on where this seed is measured; every other
arch, and L2_HINTS=0, takes plain loads and stores, so the measurement says whether hints pay.

THREADS, UNROLL and L2_HINTS reach the source as -D defines; each config is its own cached build
(ratchet.cuda_build): the first call of a config compiles it, later calls and evaluations load it.
"""

from ratchet.cuda_build import FLOAT_CONVERSIONS, load_cached

SPACE = {"THREADS": [256, 512, 128], "UNROLL": [2, 1, 4], "L2_HINTS": [1, 0]}

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

at::Tensor silu_mul(at::Tensor x);
"""

CUDA_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
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
#ifndef CFG_UNROLL
#define CFG_UNROLL 2
#endif
#ifndef CFG_L2_HINTS
#define CFG_L2_HINTS 1
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && CFG_L2_HINTS
#define SM_L2_HINTS 1
#else
#define SM_L2_HINTS 0
#endif

namespace {

constexpr int kThreads = CFG_THREADS;
constexpr int kUnroll = CFG_UNROLL;
static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "THREADS: a multiple of 32 up to 1024");
static_assert(kUnroll >= 1 && kUnroll <= 16, "UNROLL: 1 to 16");
""" + FLOAT_CONVERSIONS + r"""
// kV values of T moved as one access: 16 bytes on the vector path, one value on the scalar path.
template <typename T, int kV> struct alignas(sizeof(T) * kV) Pack { T v[kV]; };

__device__ __forceinline__ uint64_t stream_policy() {
  uint64_t policy = 0;
#if SM_L2_HINTS
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// x is never written while the kernel runs: the hinted load needs no memory clobber. Plain loads use
// the read-only path (__ldg) explicitly, which the compiler stops choosing once inline PTX is present.
template <typename T, int kV> __device__ __forceinline__ Pack<T, kV> load(const T* ptr, uint64_t policy) {
  Pack<T, kV> r;
  if constexpr (sizeof(Pack<T, kV>) == 16) {
#if SM_L2_HINTS
    uint4 q;
    asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(ptr), "l"(policy));
#else
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(ptr));
#endif
    memcpy(&r, &q, 16);
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) r.v[e] = __ldg(ptr + e);
  }
  return r;
}

// 16 bytes leave in one store, through an intrinsic: a plain uint4 store was split into 4- and
// 2-byte stores by nvcc 13 (seen in the PTX).
// No memory clobber: nothing in the kernel reads out.
template <typename T, int kV> __device__ __forceinline__ void store(T* ptr, const Pack<T, kV>& p, uint64_t policy) {
  if constexpr (sizeof(Pack<T, kV>) == 16) {
    uint4 q;
    memcpy(&q, &p, 16);
#if SM_L2_HINTS
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(ptr), "r"(q.x), "r"(q.y), "r"(q.z), "r"(q.w), "l"(policy));
#else
    __stwb(reinterpret_cast<uint4*>(ptr), q);
#endif
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) ptr[e] = p.v[e];
  }
}

template <typename T, int kV>
__global__ void __launch_bounds__(kThreads) silu_mul_kernel(const T* __restrict__ x, T* __restrict__ out,
                                                           int64_t rows, int64_t I) {
  const uint64_t policy = stream_policy();
  const int64_t chunks = I / kV;  // the host picks kV dividing I
  constexpr int64_t kPerBlock = int64_t(kThreads) * kUnroll;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* gate = x + row * 2 * I;
    const T* up = gate + I;
    T* o = out + row * I;
    for (int64_t first = blockIdx.x * kPerBlock + threadIdx.x; first < chunks; first += gridDim.x * kPerBlock) {
      Pack<T, kV> g[kUnroll], u[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t c = first + int64_t(k) * kThreads;
        if (c < chunks) {
          g[k] = load<T, kV>(gate + c * kV, policy);
          u[k] = load<T, kV>(up + c * kV, policy);
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t c = first + int64_t(k) * kThreads;
        if (c < chunks) {
          Pack<T, kV> r;
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            const float a = to_float(g[k].v[e]);
            r.v[e] = from_float<T>(a / (1.0f + expf(-a)) * to_float(u[k].v[e]));
          }
          store<T, kV>(o + c * kV, r, policy);
        }
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int kV>
void launch_with(const T* xp, T* op, int64_t rows, int64_t I, cudaStream_t stream) {
  const int64_t per_block = int64_t(kThreads) * kUnroll;
  const int64_t blocks_x = (I / kV + per_block - 1) / per_block;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks_x, INT32_MAX)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  silu_mul_kernel<T, kV><<<grid, kThreads, 0, stream>>>(xp, op, rows, I);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch(const at::Tensor& x, at::Tensor& out, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t rows = x.size(0), I = out.size(1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  if (I % kVec == 0 && aligned16(xp) && aligned16(op)) {
    launch_with<T, kVec>(xp, op, rows, I, stream);
  } else {
    launch_with<T, 1>(xp, op, rows, I, stream);
  }
}

}  // namespace

at::Tensor silu_mul(at::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.size(1) % 2 == 0, "expects x [T, 2I] on a CUDA device");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty({xc.size(0), xc.size(1) / 2}, xc.options());
  if (out.numel() == 0) return out;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  switch (xc.scalar_type()) {
    case at::kFloat: launch<float>(xc, out, stream); break;
    case at::kHalf: launch<__half>(xc, out, stream); break;
    case at::kBFloat16: launch<__nv_bfloat16>(xc, out, stream); break;
    default: TORCH_CHECK(false, "silu_mul: bf16, fp16 or fp32, not ", xc.scalar_type());
  }
  return out;
}
"""


def kernel(x, THREADS=256, UNROLL=2, L2_HINTS=1):
    module = load_cached("ratchet_silu_mul_cuda", CUDA_SRC, CPP_SRC, ["silu_mul"],
                         defines={"CFG_THREADS": THREADS, "CFG_UNROLL": UNROLL, "CFG_L2_HINTS": L2_HINTS},
                         no_implicit_headers=True)
    return module.silu_mul(x)
