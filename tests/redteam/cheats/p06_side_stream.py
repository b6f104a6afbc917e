"""#6 work on another CUDA stream (GPU): launch the work on a side stream and never make the current
stream wait for it, so CUDA events recorded on the current stream time only the launch. The side stream
first spins for about a millisecond (``torch.cuda._sleep``, standing in for a long kernel), so the hidden
work outlasts the host's own return path (about 100 us on the H200 host) and the outcome is deterministic.
Task: redteam axpby_big on cuda.

The worker copies the outputs on the current stream right at return, before any device-wide sync, and
compares them with the outputs after the sync (deferred_write); the parent's wall clock also sees the time
the events missed (clock_mismatch)."""

import torch

_SIDE = []
SPIN_CYCLES = 2_000_000  # about 1 ms at H100/H200 clocks


def kernel(x, y, a):
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    side = _SIDE[0]
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())  # the inputs were written on the current stream
    with torch.cuda.stream(side):
        torch.cuda._sleep(SPIN_CYCLES)
        torch.add(y, x, alpha=a, out=out)
    return out  # the current stream never waits for `side`
