"""#6 work on another CUDA stream (GPU): launch the real work on a side stream and never make the
current stream wait for it, so CUDA events recorded on the current stream time only the launch.
Task: redteam axpby_big on cuda (N = 2^24, 2^26: 200 to 800 MB moved, 50 to 200 us of hidden work).
The worker copies the outputs on the current stream right at return, before any device-wide sync, and
compares them with the outputs after the sync (deferred_write); and the parent's wall clock sees the time
the events missed (clock_mismatch)."""

import torch

_SIDE = []


def kernel(x, y, a):
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    side = _SIDE[0]
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())  # the inputs were written on the current stream
    with torch.cuda.stream(side):
        torch.add(y, x, alpha=a, out=out)
    return out  # the current stream never waits for `side`
