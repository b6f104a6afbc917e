"""Honest twin of #4 and #8: a pool of preallocated outputs, two per shape used in turn (so the output
of the last call is still intact while the next is written, as a double-buffered decode loop keeps
them), refilled from this call's inputs on every call and returned whole. An output buffer reused
across calls is honest when every call writes its values: each call's outputs are checked, timed ones
included, as the caller saw them at return. Must pass. Task: axpby, timed."""

import torch

_RING: dict = {}
_TURN: dict = {}


def kernel(x, y, a):
    key = (tuple(x.shape), x.dtype, x.device)
    ring = _RING.get(key)
    if ring is None:
        ring = _RING[key] = (torch.empty_like(x), torch.empty_like(x))
    turn = _TURN.get(key, 0)
    _TURN[key] = 1 - turn
    out = ring[turn]
    torch.add(y, x, alpha=a, out=out)
    return out
