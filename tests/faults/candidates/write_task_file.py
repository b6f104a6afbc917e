"""Fault: at import, rewrite the task file (FAULT_TARGET) so the reference, imported later by the reference
worker, sleeps in every call: the candidate's speedup would be inflated. Refused by the box."""

import os

with open(os.environ["FAULT_TARGET"], "a") as f:
    f.write("\nimport time as _t\n_slow = reference\n\ndef reference(*args):\n    _t.sleep(0.01)\n"
            "    return _slow(*args)\n\nTASK = TASK.__class__(**{**TASK.__dict__, 'reference': reference})\n")


def kernel(x, y, a):
    import torch

    return torch.add(y, x, alpha=a)
