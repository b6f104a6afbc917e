"""GPU fault: a Triton kernel that spins on a flag nobody sets: the launch returns, the GPU never does."""

import torch
import triton
import triton.language as tl


@triton.jit
def _spin(flag_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass


def kernel(x, y, a):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    _spin[(1,)](flag)
    return torch.add(y, x, alpha=a)
