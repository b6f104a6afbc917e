"""#20 one shape driven toward zero time to inflate the mean: honest outputs everywhere, but on N = 4096
the harness's saved clock (``ratchet.judge.timing.perf_counter_ns``, writable from the candidate)
reports 1 ns for the call. One shape a thousand times "faster" multiplies a geometric mean over two
shapes by about 30. Task: axpby, timed. The judge's per-shape roofline floor rejects it
(beyond_roofline); an identity check of the harness's clock would too (timer_tampered)."""

import time

import torch

import ratchet.judge.timing as _timing

_real_ns = time.perf_counter_ns
_state = {"freeze": False, "last": 0}


def _clock():
    if _state["freeze"]:
        _state["freeze"] = False
        return _state["last"] + 1
    _state["last"] = _real_ns()
    return _state["last"]


_timing.perf_counter_ns = _clock


def kernel(x, y, a):
    out = torch.add(y, x, alpha=a)
    if x.numel() == 4096:
        _state["freeze"] = True
    return out
