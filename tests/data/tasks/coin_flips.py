"""A tiny sampling task for the judge's own tests: one Bernoulli(p) draw per element. Correctness is a
StatisticalRule: the draws are 0 or 1, and the number of ones over all calls lies within five standard
deviations of the sum of p (an honest sampler fails it with probability under 1e-6)."""

import math

import torch

from ratchet.task import Cost, ShapeSet, StatisticalRule, Task


def reference(p):
    return torch.bernoulli(p)


def make_inputs(shape, dtype, device, generator):
    return (torch.rand(shape["N"], dtype=dtype, device=device, generator=generator),)


def test(pairs):
    ones = expected = variance = 0.0
    for (p,), (draws,) in pairs:
        if not bool(((draws == 0) | (draws == 1)).all()):
            return ["a draw that is neither 0 nor 1"]
        p = p.double()
        ones += float(draws.double().sum())
        expected += float(p.sum())
        variance += float((p * (1 - p)).sum())
    z = (ones - expected) / math.sqrt(max(variance, 1e-12))
    return [f"{ones:.0f} ones where {expected:.1f} were expected (z = {z:.1f})"] if abs(z) > 5 else []


SHAPES = ShapeSet(public=[{"N": 512}, {"N": 2048}])

# Enough draws per shape for the rule: 8 calls of 512 at the first shape, 2 of 2048 at the second.
RULE = StatisticalRule(test=test, draws=lambda s: s["N"], min_draws=4096, max_calls=8, false_reject_rate=1e-6)

TASK = Task(name="coin_flips", dtypes=(torch.float32,), gpu=SHAPES, cpu=SHAPES, check=RULE,
            reference=reference, make_inputs=make_inputs, cost=lambda s, d: Cost(bytes=8 * s["N"]))
