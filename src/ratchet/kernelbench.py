"""KernelBench compatibility: problem files (``Model``) as tasks, solution files (``ModelNew``) as kernels.

A KernelBench problem defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``;
a solution defines ``class ModelNew`` with the same constructor and forward. KernelBench makes both
models' parameters equal by building each right after ``torch.manual_seed(<same seed>)``; we do the
same with ``KERNELBENCH_INIT_SEED`` so an honest ModelNew matches the reference.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import torch

from ratchet.task import Cost, ShapeSet, Task, TaskError, Tolerance, _import_file

KERNELBENCH_INIT_SEED = 42

# Problem modules by resolved source path, so kernel_from_modelnew finds the Model's get_init_inputs
# without importing the problem file a second time (it re-imports only on a miss, e.g. a fresh process).
_PROBLEMS: dict[str, Any] = {}

# KernelBench problems have fixed sizes baked into get_inputs(), so there is one public "shape" and no
# held-out ranges to draw from: shape dicts carry no dimensions, only a name for reports.
_ONE_SHAPE = ShapeSet(public=({"problem": 0},), held_out=None)


def task_from_kernelbench(module, path) -> Task:
    """Wrap a KernelBench problem module as a Task (inputs from get_inputs, reference from Model)."""
    path = Path(path)
    source = str(path.resolve())  # absolute: workers may run in another directory
    _PROBLEMS[source] = module
    models: dict[tuple[str, torch.dtype], torch.nn.Module] = {}
    costs: dict[torch.dtype, Cost] = {}

    def make_inputs(shape, dtype: torch.dtype, device: str, generator: torch.Generator) -> tuple:
        # get_inputs() draws from torch's global RNG; seed it from the judge's generator so the same
        # secret seed gives the same inputs in every process, and restore the global state afterwards.
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        with _fork_rng():
            torch.manual_seed(seed)
            raw = module.get_inputs()
        return tuple(_to(x, device, dtype) for x in raw)

    def reference(*inputs):
        device, dtype = _first_tensor_placement(inputs)
        key = (str(device), dtype)
        if key not in models:
            # The judge calls this on float64-upcast inputs, so the parameters go to float64 too.
            models[key] = _build(module.Model, module, dtype).to(device=device, dtype=dtype)
        with torch.no_grad():
            return models[key](*inputs)

    def cost(shape, dtype: torch.dtype) -> Cost:
        if dtype not in costs:
            costs[dtype] = Cost(bytes=_min_bytes(module, dtype), flops=0.0)  # FLOPs unknown in general
        return costs[dtype]

    doc = inspect.getdoc(module) or inspect.getdoc(module.Model) or ""
    if doc == inspect.getdoc(torch.nn.Module):  # Model without a docstring inherits nn.Module's
        doc = ""
    return Task(
        name=path.stem,
        reference=reference,
        make_inputs=make_inputs,
        gpu=_ONE_SHAPE,
        cpu=_ONE_SHAPE,
        dtypes=(torch.float32,),
        cost=cost,
        # KernelBench judges fp32 with torch.allclose(atol=1e-2, rtol=1e-2); using the same bar means its
        # solutions pass here exactly when they pass there (the default 1e-5 would reject e.g. TF32 paths
        # that KernelBench accepts by design).
        tolerances={torch.float32: Tolerance(atol=1e-2, rtol=1e-2)},
        description=doc.strip(),
        source_path=source,
        seeds_dir=None,
    )


def kernel_from_modelnew(candidate_module, task: Task) -> Callable[..., Any]:
    """Turn a solution module's ``ModelNew`` into ``kernel(*inputs)`` for the judge's worker."""
    from ratchet.candidate import CandidateError

    model_new = getattr(candidate_module, "ModelNew", None)
    if model_new is None:
        raise CandidateError("candidate defines no ModelNew class (a KernelBench solution needs one)")
    problem = _problem_module(task)
    if problem is None:
        raise CandidateError(f"task '{task.name}' is not a KernelBench problem; a ModelNew candidate needs one")
    state: dict[str, torch.nn.Module] = {}

    def kernel(*inputs):
        if "model" not in state:
            # Built on the CPU after the shared seed, then moved, exactly as KernelBench does, so its
            # parameters equal the reference Model's.
            device, _ = _first_tensor_placement(inputs)
            state["model"] = _build(model_new, problem, None).to(device)
        with torch.no_grad():
            return state["model"](*inputs)

    return kernel


def _problem_module(task: Task):
    """The KernelBench problem module behind a task, or None if the task is not one."""
    if not task.source_path:
        return None
    module = _PROBLEMS.get(task.source_path)
    if module is None and Path(task.source_path).is_file():
        try:
            module = _import_file(Path(task.source_path), "ratchet_task_")
        except TaskError:
            return None
    if module is None or hasattr(module, "TASK") or not (hasattr(module, "Model") and hasattr(module, "get_inputs")):
        return None
    _PROBLEMS[task.source_path] = module
    return module


def _build(cls, problem, dtype: torch.dtype | None) -> torch.nn.Module:
    """Construct ``cls(*get_init_inputs())`` right after the shared seed, leaving global RNG untouched."""
    with _fork_rng():
        torch.manual_seed(KERNELBENCH_INIT_SEED)
        init = problem.get_init_inputs() if hasattr(problem, "get_init_inputs") else []
        model = cls(*init)
    return model.eval()


def _fork_rng():
    # Name CUDA devices explicitly: fork_rng warns when it has to guess with more than one GPU.
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


def _to(x, device: str, dtype: torch.dtype):
    if not isinstance(x, torch.Tensor):
        return x
    if x.is_floating_point() and dtype.is_floating_point and x.dtype != dtype:
        x = x.to(dtype)
    return x.to(device)


def _first_tensor_placement(inputs) -> tuple[torch.device, torch.dtype]:
    """Device of the first tensor input and dtype of the first floating one (float32 if none)."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    floats = [x.dtype for x in tensors if x.is_floating_point()]
    return device, floats[0] if floats else torch.float32


def _min_bytes(module, dtype: torch.dtype) -> float:
    """Input bytes plus output bytes: every kernel must read its inputs and write its outputs once.

    Run on the meta device so nothing is allocated or computed; if the model cannot run there, the
    input bytes alone are still a valid (looser) lower bound.
    """
    try:
        with _fork_rng(), torch.device("meta"):
            inputs = tuple(_to(x, "meta", dtype) for x in module.get_inputs())
    except Exception:  # e.g. get_inputs() calls .cuda(): make the real inputs once instead
        with _fork_rng():
            inputs = tuple(_to(x, "cpu", dtype) for x in module.get_inputs())
    total = sum(_nbytes(x) for x in inputs)
    try:
        with torch.device("meta"), torch.no_grad():
            model = _build(module.Model, module, None).to(dtype=dtype)
            total += _nbytes(model(*inputs))
    except Exception:  # the user's model: some ops have no meta kernel
        pass
    return float(total)


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0
