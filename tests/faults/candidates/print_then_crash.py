"""Fault: 20 MB printed, then a segfault: the crash's detail must stay short."""

import ctypes
import sys


def kernel(x, y, a):
    sys.stderr.write(("noise " * 100_000 + "\n") * 35)
    ctypes.string_at(0)
