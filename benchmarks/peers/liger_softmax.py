"""Peer for the softmax task: Liger-Kernel's softmax over the last dim, as benchmarks/suite.py judges it.

Liger keeps a whole row in one Triton block and refuses rows wider than 65536 (its
calculate_settings limit), so the vocabulary-wide rows of the task (N = 128256, 129280) are out of its
reach: the suite judges this peer on the task's shapes with N <= 65536 only (held-out ranges included)
and marks the others "n/a".
"""

from liger_kernel.ops import LigerSoftmaxFunction


def kernel(x):
    return LigerSoftmaxFunction.apply(x)
