"""#13 telling correctness calls from timed ones: peek at the request in the worker's ``serve`` frame;
correctness calls carry ``poison``, timed ones ``flush``. Honest when checked, a cheap wrong answer when
timed. Task: axpby, timed. Which timed calls get checked is decided after the call: timed_output_wrong."""

import sys

import torch


def _request():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "serve":
        frame = frame.f_back
    return frame.f_locals.get("msg", {}) if frame is not None else {}


def kernel(x, y, a):
    if _request().get("poison"):
        return torch.add(y, x, alpha=a)
    return y.clone()
