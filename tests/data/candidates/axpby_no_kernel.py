def kernal(x, y, a):  # misspelled: no kernel here
    return a * x + y
