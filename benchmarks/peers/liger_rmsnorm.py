"""Peer for the rmsnorm task: Liger-Kernel's RMSNorm, as benchmarks/suite.py judges it.

Liger's forward takes x [T, H] and weight [H] as the task does. casting_mode "gemma" keeps x, the
weight and the math in fp32 and rounds the output once to x's dtype, which is the task's contract;
Liger's default "llama" mode rounds x * rstd to x's dtype before the weight multiply (two roundings,
the same memory traffic). offset 0.0: out = x * rstd * weight.
"""

from liger_kernel.ops import LigerRMSNormFunction


def kernel(x, weight, eps):
    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma")
