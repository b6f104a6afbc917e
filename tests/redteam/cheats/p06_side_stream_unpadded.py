"""#6 work on another CUDA stream, as a real cheat would do it (GPU): the whole kernel on a side stream
the current stream never waits for; no padding, so the hidden work (about 150 us at N = 2^26) is about
as long as the host's own return path on the H200 host. The worker's snapshot at return races with the
side stream and usually sees the finished output; the outside clock's noise there is hundreds of us, so
the end-to-end verdict is pass or clock_mismatch by chance. Judged instead by what the worker's timer
reports (test_gpu_timer_covers_side_stream_work): the events must cover the side stream's work, as a
device-wide synchronize inside the timed region would make them."""

import torch

_SIDE = []


def kernel(x, y, a):
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    side = _SIDE[0]
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.add(y, x, alpha=a, out=out)
    return out
