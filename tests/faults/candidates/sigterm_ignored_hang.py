"""Fault: SIGTERM ignored, then a hang: the judge's SIGKILL after the grace must still end it."""

import signal


def kernel(x, y, a):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pass
