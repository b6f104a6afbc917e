"""An rmsnorm candidate whose C++ does not compile (a missing semicolon): the judge must answer `error`,
code compile_error, with g++'s own "file:line:col: error: ..." line in the detail."""

from ratchet.cuda_build import load_cached

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

at::Tensor rmsnorm(at::Tensor x, at::Tensor weight, double eps) {
  auto out = x.clone()
  return out;
}
"""


def kernel(x, weight, eps):
    module = load_cached("ratchet_test_syntax_error", None, CPP_SRC, ["rmsnorm"], no_implicit_headers=True)
    return module.rmsnorm(x, weight, eps)
