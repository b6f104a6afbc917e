"""Fault: os._exit(7): no cleanup, no exception."""

import os


def kernel(x, y, a):
    os._exit(7)
