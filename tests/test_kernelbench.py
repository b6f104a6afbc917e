"""KernelBench problem files load as tasks and ModelNew solutions run as kernels."""

from pathlib import Path

import pytest
import torch

from ratchet import kernelbench
from ratchet.candidate import CandidateError, load_candidate
from ratchet.kernelbench import KERNELBENCH_INIT_SEED, kernel_from_modelnew
from ratchet.task import Task, _import_file, load_task

DATA = Path(__file__).parent / "data" / "kernelbench"
PROBLEM = DATA / "1_matmul_relu.py"
SHAPE = {"problem": 0}


def _inputs(task, seed, dtype=torch.float32):
    return task.make_inputs(SHAPE, dtype, "cpu", torch.Generator().manual_seed(seed))


def _candidate(name):
    return _import_file(DATA / name, "test_kb_candidate_")


def _max_error(task, candidate_file, seed):
    inputs = _inputs(task, seed)
    out = kernel_from_modelnew(_candidate(candidate_file), task)(*inputs)
    ref = task.reference(*(x.double() for x in inputs))
    tol = task.tolerances[torch.float32]
    assert out.dtype == torch.float32 and out.shape == ref.shape
    excess = (out.double() - ref).abs() - (tol.atol + tol.rtol * ref.abs())
    return (out.double() - ref).abs().max().item(), bool((excess <= 0).all())


def test_problem_file_loads_as_task():
    task = load_task(str(PROBLEM))
    assert isinstance(task, Task)
    assert task.name == "1_matmul_relu"
    assert list(task.gpu.public) == [SHAPE] and list(task.cpu.public) == [SHAPE]
    assert task.gpu.held_out is None and task.cpu.held_out is None
    assert tuple(task.dtypes) == (torch.float32,)
    assert task.tolerances[torch.float32].atol == 1e-2
    assert "ReLU" in task.description
    assert Path(task.source_path) == PROBLEM.resolve() and task.seeds() == []
    # Input bytes (8x32 fp32) plus output bytes (8x16 fp32), found on the meta device.
    assert task.shape_cost(SHAPE, torch.float32).bytes == (8 * 32 + 8 * 16) * 4


def test_make_inputs_deterministic_per_seed_and_leaves_global_rng_alone():
    task = load_task(str(PROBLEM))
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = _inputs(task, 7), _inputs(task, 7), _inputs(task, 8)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert len(a) == 1 and a[0].shape == (8, 32) and a[0].dtype == torch.float32
    assert torch.equal(a[0], b[0])
    assert not torch.equal(a[0], c[0])
    assert _inputs(task, 7, torch.float64)[0].dtype == torch.float64


def test_reference_matches_plain_float64_math():
    task = load_task(str(PROBLEM))
    (x,) = _inputs(task, 1)
    torch.manual_seed(KERNELBENCH_INIT_SEED)  # KernelBench's convention: Model built right after the seed
    linear = torch.nn.Linear(32, 16)
    w, b = linear.weight.detach().double(), linear.bias.detach().double()
    expected = torch.relu(x.double() @ w.T + b)
    got = task.reference(x.double())
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert (expected == 0).any() and (expected > 0).any()  # the relu matters on these inputs


def test_honest_solution_passes_on_fresh_inputs():
    task = load_task(str(PROBLEM))
    for seed in (11, 12, 13):
        err, ok = _max_error(task, "1_matmul_relu_solution.py", seed)
        assert ok, f"honest ModelNew rejected (max error {err})"
        assert err < 1e-5  # same parameters, fp32 vs fp64: only rounding differs


def test_wrong_solution_fails():
    task = load_task(str(PROBLEM))
    err, ok = _max_error(task, "1_matmul_relu_wrong.py", 11)
    assert not ok and err > 0.1


def test_problem_found_again_in_a_fresh_process():
    # A worker process loads the task itself; simulate it by forgetting the registry.
    task = load_task(str(PROBLEM))
    kernelbench._PROBLEMS.clear()
    inputs = _inputs(task, 3)
    out = kernel_from_modelnew(_candidate("1_matmul_relu_solution.py"), task)(*inputs)
    torch.testing.assert_close(out.double(), task.reference(*(x.double() for x in inputs)), rtol=1e-5, atol=1e-5)


def test_kernel_from_modelnew_errors():
    task = load_task(str(PROBLEM))
    with pytest.raises(CandidateError, match="ModelNew"):
        kernel_from_modelnew(_import_file(PROBLEM, "test_kb_problem_"), task)
    plain = Task(name="plain", reference=lambda x: x, make_inputs=lambda *a: (), gpu=task.gpu, cpu=task.cpu)
    with pytest.raises(CandidateError, match="not a KernelBench"):
        kernel_from_modelnew(_candidate("1_matmul_relu_solution.py"), plain)


def test_solution_file_is_a_kernelbench_candidate():
    assert load_candidate(DATA / "1_matmul_relu_solution.py").kind == "kernelbench"
