"""#9 patching the GPU timer (GPU): make ``torch.cuda.Event.elapsed_time`` report half the time. The
harness's saved ``Event`` is the same class, so the patch would reach it; the worker checks the
identity of the method: timer_tampered. Task: axpby on cuda."""

import torch

_real = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 2


def kernel(x, y, a):
    return torch.add(y, x, alpha=a)
