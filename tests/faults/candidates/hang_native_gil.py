"""Fault: a tight loop in a shared library built by the test (gcc), called with the GIL held (PyDLL),
so not even the worker's heartbeat thread can run. FAULT_LIB: the library's path."""

import ctypes
import os


def kernel(x, y, a):
    ctypes.PyDLL(os.environ["FAULT_LIB"]).spin()
