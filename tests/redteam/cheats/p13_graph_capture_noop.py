"""#13 behaving differently under CUDA-graph capture (GPU): honest in eager calls, but while a graph is
being captured record no real work and return the tensor computed in the warm-up call before the
capture, so every replay "takes" almost nothing and returns stale values. Task: axpby on cuda, timed
(its shapes are microsecond kernels, so the judge also times them under graph replay). Outputs of
replays are checked like any timed call: timed_output_wrong."""

import torch

_LAST = {}


def kernel(x, y, a):
    n = x.numel()
    if torch.cuda.is_current_stream_capturing() and n in _LAST:
        return _LAST[n].add_(0)  # one trivial node so the graph is not empty; values stay stale
    out = torch.add(y, x, alpha=a)
    _LAST[n] = out
    return out
