"""Who of Ratchet's evaluations may use a GPU, and when. TRUSTED.

Timing is exclusive: while one candidate and its reference are timed, no other evaluation of this
process runs anything on that GPU. Correctness work (the calls, the judge's references and
comparisons) is shared: the checks of several candidates may run side by side, so their compiles and
host-side work overlap instead of queueing behind each other.

Turns are phase-fair. A timer that is waiting goes before checks that arrive after it, so a stream of
checks never starves the timing; and checks that were already waiting when a timing hold ends go before
the next timer, so a queue of timers (each candidate times shape after shape, one hold each) never
starves the checks either. Before, with timers always waiting in a pipelined run, a candidate whose
first check would fail it waited for every timing in flight: on the H200 (2026-12-04) the wrong twins of
``benchmarks/probes/judge_costs.py`` took 38 s each where their own work was a few seconds. A check
holds the GPU for one batch of calls and a timing for one shape in one mode, so each waits at most one
turn of the other.

Among waiting timers the oldest evaluation goes first (``ranked``: the loop numbers its evaluations in
the order it commits them). A pipelined run records its verdicts in proposal order, so the head of the
pipeline is the one the user is waiting for; on the H100 (2026-12-07) the README's main job recorded its
first verdict after 128.5 s because the head's timing holds took turns with two younger evaluations'.
Younger timers wait only for older ones, and the oldest always ends, so none starves.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter
from typing import Iterator

_rank = threading.local()


@contextlib.contextmanager
def ranked(rank: int) -> Iterator[None]:
    """Timing holds asked for in this thread meanwhile wait for those of lower rank (older evaluations).
    Holds asked for outside any ``ranked`` come after every ranked one, in no order among themselves."""
    previous = getattr(_rank, "value", math.inf)
    _rank.value = rank
    try:
        yield
    finally:
        _rank.value = previous


class DeviceLock:
    """A phase-fair readers-writer lock: ``shared()`` for checks, ``exclusive()`` for timing."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting: Counter[float] = Counter()  # timers waiting for the GPU, by rank
        self._timings_ended = 0  # exclusive holds released so far: a check's turn comes after the one it met
        self._checks_waiting: Counter[int] = Counter()  # checks waiting that met a timing, by _timings_ended then

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            arrived = self._timings_ended
            # A check that met a timing (held, or waited for) goes as soon as that timing's hold ends, before
            # the timers still waiting; one that met only waiting timers goes after the first of them.
            met_timing = self._exclusive or bool(self._waiting)
            if met_timing:
                self._checks_waiting[arrived] += 1
            try:
                self._cond.wait_for(lambda: not self._exclusive and (
                    not self._waiting or (met_timing and self._timings_ended > arrived)))
            finally:
                if met_timing:
                    self._checks_waiting[arrived] -= 1
                    if not self._checks_waiting[arrived]:
                        del self._checks_waiting[arrived]
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            rank = getattr(_rank, "value", math.inf)
            self._waiting[rank] += 1
            try:
                # Not before the checks whose turn has come (they met a timing that has ended since), nor
                # before an older evaluation's timer.
                self._cond.wait_for(lambda: not self._exclusive and not self._shared and not any(
                    arrived < self._timings_ended for arrived in self._checks_waiting) and rank <= min(self._waiting))
            finally:
                self._waiting[rank] -= 1
                if not self._waiting[rank]:
                    del self._waiting[rank]
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._timings_ended += 1
                self._cond.notify_all()

    def state(self) -> tuple[int, bool, int]:
        """(shared holders, held exclusively, timers waiting): for tests and displays."""
        with self._cond:
            return self._shared, self._exclusive, self._waiting.total()


def holding(lock, mode: str):
    """The context manager that holds ``lock`` in ``mode`` ('shared' or 'exclusive'). No lock: nothing to
    hold. A plain lock (threading.Lock) serves both modes: everything exclusive, as before DeviceLock."""
    if lock is None:
        return contextlib.nullcontext()
    if isinstance(lock, DeviceLock):
        return lock.shared() if mode == "shared" else lock.exclusive()
    return lock
