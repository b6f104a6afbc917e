import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

# Triton kernels run on the CPU through the interpreter when no GPU is present.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The suite never reads or writes the user's cache (measured ceilings live there): every test, and every
# process a test starts (they inherit os.environ), gets this private one. Set at import, before any test
# module is collected; a ceiling cached by a busy user's machine once failed four tests of a fresh clone.
USER_CACHE = Path.home() / ".cache" / "ratchet"
PRIVATE_CACHE = Path(tempfile.mkdtemp(prefix="ratchet-test-cache-"))
os.environ["RATCHET_CACHE"] = str(PRIVATE_CACHE)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (nothing when it does not exist)."""
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def private_ratchet_cache():
    """The private cache for the whole session, and a check at its end that the user's was not touched."""
    before = _snapshot(USER_CACHE)
    os.environ["RATCHET_CACHE"] = str(PRIVATE_CACHE)
    yield PRIVATE_CACHE
    after = _snapshot(USER_CACHE)
    shutil.rmtree(PRIVATE_CACHE, ignore_errors=True)
    assert after == before, f"the test suite wrote the user's cache {USER_CACHE}: {sorted(set(after.items()) ^ set(before.items()))}"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
