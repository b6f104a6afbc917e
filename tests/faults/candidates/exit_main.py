"""Fault: sys.exit(3) in the kernel itself."""

import sys


def kernel(x, y, a):
    sys.exit(3)
