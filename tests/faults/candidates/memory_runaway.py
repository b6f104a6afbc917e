"""Fault: host memory grows without end, 64 MiB at a time, each page touched so it is resident."""


def kernel(x, y, a):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))
        hoard[-1][::4096] = b"x" * len(hoard[-1][::4096])
