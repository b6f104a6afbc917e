"""#3 writing the result into an input and returning it: y += a * x, return y. The output aliases an
input and the input changed. Task: axpby. input_mutated (and not_dense: the output shares storage)."""


def kernel(x, y, a):
    return y.add_(x, alpha=a)
