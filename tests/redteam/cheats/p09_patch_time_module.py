"""#9 patching the timer: replace time.perf_counter_ns (and perf_counter) with clocks that run at half
speed, so any harness that reads ``time.perf_counter_ns()`` sees half the real time. Task: axpby,
timed. The worker keeps its own references to the primitives and checks their identity: timer_tampered."""

import time

import torch

_real_ns, _real = time.perf_counter_ns, time.perf_counter
time.perf_counter_ns = lambda: _real_ns() // 2
time.perf_counter = lambda: _real() / 2


def kernel(x, y, a):
    return torch.add(y, x, alpha=a)
