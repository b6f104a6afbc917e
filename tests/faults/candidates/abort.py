"""Fault: abort() (SIGABRT), as a failed C assertion does."""

import os


def kernel(x, y, a):
    os.abort()
