import os

import pytest
import torch

# Triton kernels run on the CPU through the interpreter when no GPU is present.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def benchmark_results_file(tmp_path, monkeypatch):
    """The benchmarks append to one results file; in a test it is the test's own (subprocesses inherit it)."""
    path = tmp_path / "benchmark-results.jsonl"
    monkeypatch.setenv("RATCHET_BENCH_RESULTS", str(path))
    return path


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
