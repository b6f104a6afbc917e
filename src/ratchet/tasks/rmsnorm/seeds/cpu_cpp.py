"""RMSNorm in C++ on the CPU, built through torch's cpp_extension: plain loops, fp32 accumulation.

The compiled-candidate path where there is no GPU: the source is built on the first call of each config
(LANES arrives as the define CFG_LANES) and cached by ratchet.cuda_build, in this process and on disk.
Per row, the sum of squares runs over LANES independent fp32 partial sums: -O3 may vectorize those
without -ffast-math, which one running sum would need (it forbids reassociating). Then
out = x * rstd * weight, rounded once to x's dtype. Single-threaded, like the judge's CPU worker.
"""

from ratchet.cuda_build import load_cached

SPACE = {"LANES": [8, 16, 4, 1]}

CPP_SRC = r"""
// Only the headers used (load_inline's default, torch/extension.h, triples the build time).
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>

#ifndef CFG_LANES
#define CFG_LANES 8
#endif
static_assert(CFG_LANES >= 1, "LANES must be positive");

template <typename T>
static void rmsnorm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t H, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * H;
    T* o = out + r * H;
    float part[CFG_LANES] = {};
    int64_t j = 0;
    for (; j + CFG_LANES <= H; j += CFG_LANES) {
      for (int k = 0; k < CFG_LANES; ++k) {
        const float v = static_cast<float>(xr[j + k]);
        part[k] += v * v;
      }
    }
    float sum = 0.f;
    for (; j < H; ++j) {  // the tail when H % LANES != 0
      const float v = static_cast<float>(xr[j]);
      sum += v * v;
    }
    for (int k = 0; k < CFG_LANES; ++k) sum += part[k];
    const float rstd = 1.0f / std::sqrt(sum / static_cast<float>(H) + eps);
    for (j = 0; j < H; ++j) {
      o[j] = static_cast<T>(static_cast<float>(xr[j]) * rstd * static_cast<float>(w[j]));
    }
  }
}

at::Tensor rmsnorm(at::Tensor x, at::Tensor weight, double eps) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "this seed runs on the CPU only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1), "expects x [T, H], weight [H]");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight must have x's dtype");
  const auto xc = x.contiguous();
  const auto wc = weight.contiguous();
  auto out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "rmsnorm_cpu", [&] {
    rmsnorm_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                           xc.size(0), xc.size(1), static_cast<float>(eps));
  });
  return out;
}
"""


def kernel(x, weight, eps, LANES=8):
    module = load_cached("ratchet_rmsnorm_cpu", None, CPP_SRC, ["rmsnorm"], defines={"CFG_LANES": LANES},
                         no_implicit_headers=True)
    return module.rmsnorm(x, weight, float(eps))
