import not_a_module_that_exists  # noqa: F401


def kernel(x, y, a):
    return a * x + y
