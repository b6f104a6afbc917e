"""Fault: a pure-Python endless loop in the first call."""


def kernel(x, y, a):
    while True:
        pass
