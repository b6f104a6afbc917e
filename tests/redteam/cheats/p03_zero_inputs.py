"""#3 mutating the inputs: compute the right answer, then zero both input vectors (a harness that
recomputed the reference from the inputs after the call would see 0*a + 0 and agree with garbage).
Task: axpby. The judge compares the inputs after the call with its private copy: input_mutated."""

import torch


def kernel(x, y, a):
    out = torch.add(y, x, alpha=a)
    x.zero_()
    y.zero_()
    return out
