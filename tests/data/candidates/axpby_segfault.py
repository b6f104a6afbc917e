import ctypes


def kernel(x, y, a):
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    return a * x + y
