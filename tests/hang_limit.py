"""A wall-clock limit for one fuzz example: SIGALRM turns a hang into a failing assertion that names what
hung, instead of a test run that never ends."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def hang_limit(seconds: int, what: str):
    def hung(signum, frame):
        raise AssertionError(f"{what} took more than {seconds} s (a hang)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
