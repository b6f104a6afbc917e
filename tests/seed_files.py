"""Helpers for the tests that import files: a built-in task's seed file, any Python file as a fresh module,
and a skip for Triton where it cannot run."""

import os
from pathlib import Path

import pytest
import torch

from ratchet.task import BUILTIN_TASKS_DIR, _import_file


def import_seed(task: str, name: str):
    """The seed module ``name`` of built-in task ``task``, freshly imported."""
    return _import_file(BUILTIN_TASKS_DIR / task / "seeds" / f"{name}.py", f"{task}_seed_{name}_")


def import_file(path):
    """The Python file at ``path`` (a start file, a standalone best, ...), freshly imported."""
    return _import_file(Path(path), "test_file_")


def require_triton():
    """Triton seeds run on a GPU, or on the CPU through the interpreter (tests/conftest.py turns it on)."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and Triton was not put in interpreter mode")
    pytest.importorskip("triton")
