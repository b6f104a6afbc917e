"""Fault: a segmentation fault in native code (a NULL read through ctypes)."""

import ctypes


def kernel(x, y, a):
    ctypes.string_at(0)
