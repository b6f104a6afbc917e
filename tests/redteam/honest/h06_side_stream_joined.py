"""Honest twin of #6 and #18 (GPU): the work runs on a side stream that the current stream waits for
before returning (and the output is recorded on the current stream), so events on the current stream
cover it. No access-policy window: the baseline the persisting-L2 cheat is compared with.
Must pass. Tasks: redteam axpby_big and axpby_l2 on cuda."""

import torch

_SIDE = []


def kernel(x, y, a):
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    side, main = _SIDE[0], torch.cuda.current_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        out = torch.add(y, x, alpha=a)
    main.wait_stream(side)
    out.record_stream(main)
    return out
