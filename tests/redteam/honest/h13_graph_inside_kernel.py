"""Honest twin of #13 (GPU): the kernel captures its own work into a CUDA graph on the first call of each
shape (static input and output buffers, warm-up on a side stream as capture requires) and replays it on
every call after copying this call's inputs into the static buffers; it returns the graph's static
output, refilled by each replay. The first call behaves differently, honestly, and every call's values
are this call's. Must pass. Task: axpby on cuda (mul and add, not the task's forbidden addcmul)."""

import torch

_GRAPHS: dict = {}


def _capture(x, y):
    sx, sy = torch.empty_like(x), torch.empty_like(y)
    sa = torch.empty((), dtype=x.dtype, device=x.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.mul(sx, sa).add_(sy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.mul(sx, sa).add_(sy)
    return graph, sx, sy, sa, out


def kernel(x, y, a):
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _GRAPHS:
        _GRAPHS[key] = _capture(x, y)
    graph, sx, sy, sa, out = _GRAPHS[key]
    sx.copy_(x)
    sy.copy_(y)
    sa.fill_(a)
    graph.replay()
    return out
