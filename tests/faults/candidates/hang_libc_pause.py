"""Fault: a hang in native code with the GIL released: libc's pause() through ctypes."""

import ctypes


def kernel(x, y, a):
    ctypes.CDLL(None).pause()
