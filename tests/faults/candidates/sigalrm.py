"""Fault: an interval timer with SIGALRM's default action, which ends the process mid-call."""

import signal
import time


def kernel(x, y, a):
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    time.sleep(5)
