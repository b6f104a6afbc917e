def kernel(x, y, a):
    raise ValueError("this kernel always fails")
