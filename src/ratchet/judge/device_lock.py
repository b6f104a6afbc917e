"""Who of Ratchet's evaluations may use a GPU, and when. TRUSTED.

Timing is exclusive: while one candidate and its reference are timed, no other evaluation of this
process runs anything on that GPU. Correctness work (the calls, the judge's references and
comparisons) is shared: the checks of several candidates may run side by side, so their compiles and
host-side work overlap instead of queueing behind each other. A timer that is waiting goes first (new
shared holders wait for it), so a stream of checks never starves the timing.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator


class DeviceLock:
    """A readers-writer lock with writer preference: ``shared()`` for checks, ``exclusive()`` for timing."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0  # timers waiting for the GPU

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
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
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()

    def state(self) -> tuple[int, bool, int]:
        """(shared holders, held exclusively, timers waiting): for tests and displays."""
        with self._cond:
            return self._shared, self._exclusive, self._waiting


def holding(lock, mode: str):
    """The context manager that holds ``lock`` in ``mode`` ('shared' or 'exclusive'). No lock: nothing to
    hold. A plain lock (threading.Lock) serves both modes: everything exclusive, as before DeviceLock."""
    if lock is None:
        return contextlib.nullcontext()
    if isinstance(lock, DeviceLock):
        return lock.shared() if mode == "shared" else lock.exclusive()
    return lock
