"""Helpers for the task tests: import a built-in task's seed file, and skip Triton where it cannot run."""

import os

import pytest
import torch

from ratchet.task import BUILTIN_TASKS_DIR, _import_file


def import_seed(task: str, name: str):
    """The seed module ``name`` of built-in task ``task``, freshly imported."""
    return _import_file(BUILTIN_TASKS_DIR / task / "seeds" / f"{name}.py", f"{task}_seed_{name}_")


def require_triton():
    """Triton seeds run on a GPU, or on the CPU through the interpreter (tests/conftest.py turns it on)."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and Triton was not put in interpreter mode")
    pytest.importorskip("triton")
