import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

# Triton kernels run on the CPU through the interpreter when no GPU is present.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One torch thread per test process and per process a test starts: the suite runs two test processes on
# two cores (pytest -n 2) and most tests start judge workers beside them, and with torch's default of a
# thread per core OpenMP's spinning threads fight over the cores. Two copies of the top-p edge-row tests
# side by side on the 2-core CPU machine (2026-12-03): 73 s with the default, 16 s with one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

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


@pytest.fixture(autouse=True)
def benchmark_results_file(tmp_path, monkeypatch):
    """The benchmarks append to one results file; in a test it is the test's own (subprocesses inherit it)."""
    path = tmp_path / "benchmark-results.jsonl"
    monkeypatch.setenv("RATCHET_BENCH_RESULTS", str(path))
    return path


# The modules that take longest on two CPU cores (2026-12-02, `--durations=0`), heaviest first. The suite
# runs two modules at a time (pytest-xdist, --dist loadscope) in collection order: these go first, so the
# short ones fill in at the end instead of one long module running alone.
HEAVIEST_MODULES = ("test_triton_seeds_sm90.py", "test_task_top_p.py", "test_loop.py",
                    "test_task_top_p_sampled_pivots.py", "test_faults.py", "test_redteam.py", "test_durability.py",
                    "test_task_top_p_split_row.py", "test_judge_basic.py", "test_eval_batch.py", "test_cli.py",
                    "test_first_use.py", "test_llm_proposer.py", "test_campaign.py", "test_e2e_stack_benchmark.py")


@pytest.fixture(scope="session")
def gemma_module_tasks(tmp_path_factory):
    """A tiny random Gemma written to a folder, profiled (decode batch 2, context 8; prefill 8 tokens) and
    its module tasks extracted: (folder, profile, written, skipped, root). Its GELU MLP is a module with no
    task (tests/test_extract_module.py, tests/test_module_route.py)."""
    pytest.importorskip("transformers")
    from ratchet.e2e.extract_module import extract_module_tasks
    from ratchet.e2e.models import families
    from ratchet.e2e.profile import profile_workload

    root = tmp_path_factory.mktemp("gemma")
    folder = families.write("gemma", root / "model")
    prof = profile_workload(str(folder), "tiny", "cpu", 2, 8, 8, 1)
    written, skipped = extract_module_tasks(prof, root / "tasks")
    return folder, prof, written, skipped, root


@pytest.fixture
def narrowed_moe_block(tmp_path, monkeypatch):
    """A tiny Qwen3-MoE widened to hidden 256 and 32 experts, with the narrowing threshold lowered so its
    MoE block's task gets a narrowed CPU set (W = 128): call it with the profile's prefill tokens and the
    batches to extract at; returns (model folder, the block's Extracted)."""
    pytest.importorskip("transformers")
    from ratchet.e2e import extract_module
    from ratchet.e2e.models import families
    from ratchet.e2e.profile import profile_workload

    monkeypatch.setattr(extract_module, "NARROW_ABOVE_BYTES", 0)
    folder = families.write("qwen3_moe", tmp_path / "model", "tiny", 1)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=256, num_local_experts=32, moe_intermediate_size=64)
    (folder / "config.json").write_text(json.dumps(config))

    def extract(prefill: int = 8, batches: tuple[int, ...] = ()):
        prof = profile_workload(str(folder), "tiny", "cpu", 2, 8, prefill, 1)
        written, _skipped = extract_module.extract_module_tasks(prof, tmp_path / "tasks", batches=batches)
        (block,) = [w for w in written if w.name.endswith("_Qwen3MoeSparseMoeBlock")]
        return folder, block

    return extract


def _heaviest_first(items) -> None:
    rank = {name: i for i, name in enumerate(HEAVIEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's order is kept


def pytest_collection_modifyitems(config, items):
    _heaviest_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
