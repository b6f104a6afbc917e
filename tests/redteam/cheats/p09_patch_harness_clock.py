"""#9 patching the harness's own saved clock: the worker reads ``ratchet.judge.timing.perf_counter_ns``
(saved at import precisely so that patching ``time`` does not matter), but that module attribute is as
writable as ``time``'s. Replace it with a half-speed clock: every timed call reports half its real
time; outputs are honest. Task: axpby, timed.

What should catch it: the identity check of primitives (guards._PRIMITIVES) covering the harness's own
references (timing.perf_counter_ns, timing.Event, timing.synchronize): timer_tampered."""

import time

import torch

import ratchet.judge.timing as _timing

_real_ns = time.perf_counter_ns
_timing.perf_counter_ns = lambda: _real_ns() // 2


def kernel(x, y, a):
    return torch.add(y, x, alpha=a)
