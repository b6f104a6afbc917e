"""Peer for the add_rmsnorm task: Liger-Kernel's fused residual add + RMSNorm, as benchmarks/suite.py
judges it.

Liger returns (normed, new_residual) with new_residual = x + residual rounded to x's dtype: the task's
outputs in the task's order. casting_mode "gemma" normalizes the rounded sum in fp32 and rounds the
output once (the task's contract); offset 0.0. It allocates both outputs, so the inputs are untouched.
"""

from liger_kernel.ops import LigerFusedAddRMSNormFunction


def kernel(x, residual, weight, eps):
    out, new_residual = LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "gemma", False)
    return out, new_residual
