def kernel(x, y, a):
    while True:
        pass
