"""#5 work done only when checked: return an unwritten output from every call and replace the harness's
``Harness.fetch`` (the worker's own code, importable from the candidate) so the work is done when, and
only when, the judge asks to see the outputs. Timed calls then measure an allocation.

Task: axpby, timed. The in-worker guards check the identity of the timing primitives but not of the
harness's own methods. What should catch it: an identity check of the harness's functions
(timer_tampered, or a harness_tampered code), or fetch sending what was there at return."""

import sys

import torch

# Started as ``python -m ratchet.judge.worker`` the worker's live module is __main__, not the importable
# ratchet.judge.worker (a second copy whose Harness nobody uses); started through an import, it is that one.
_worker = sys.modules["__main__"]
if not hasattr(_worker, "Harness"):
    import ratchet.judge.worker as _worker

_PENDING = []
_real_fetch = _worker.Harness.fetch


def _fetch(self, msg):
    while _PENDING:
        out, x, y, a = _PENDING.pop()
        torch.add(y, x, alpha=a, out=out)
    return _real_fetch(self, msg)


_worker.Harness.fetch = _fetch


def kernel(x, y, a):
    out = torch.empty_like(x)
    _PENDING[:] = [(out, x, y, a)]
    return out
