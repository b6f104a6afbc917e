"""The public task API: what a task file may import and build.

A task says what to optimize: a reference function, an input maker, the shapes (a public list plus
held-out ranges, and smaller sets for the CPU), dtypes, the correctness rule, the cost model, shape
weights and the calls a candidate may not make. Task files define ``TASK = Task(...)`` and import
nothing from Ratchet but this module (and ``ratchet.checks`` for ready-made rules).
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

Shape = Mapping[str, int]
"""One problem size, e.g. ``{"T": 4096, "H": 4096}``. Keys are the task's own dimension names."""

BUILTIN_TASKS_DIR = Path(__file__).parent / "tasks"


class TaskError(Exception):
    """A task cannot be loaded or is malformed; the message is one line for the user."""


@dataclass(frozen=True)
class Tolerance:
    """Element-wise closeness: ``|out - ref| <= atol + rtol * |ref|`` for every element.

    ``atol_of_rms``: ``atol`` is a fraction of the reference output's root mean square rather than an
    absolute number, for outputs whose scale is the task's own (a model's module at narrow widths gave
    outputs of 0.005 against an absolute atol of 0.03, so any kernel at all passed its CPU check).
    """

    atol: float
    rtol: float
    atol_of_rms: bool = False


# Tight enough to see lower precision than the dtype allows (fp32 math done in bf16 or TF32 fails the
# fp32 row), loose enough for honest reductions in a different order.
DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1e-2),
}


@dataclass(frozen=True)
class StatisticalRule:
    """Correctness for sampling tasks, whose outputs are random draws rather than values.

    The judge calls the kernel on fresh inputs until ``draws(shape)`` summed over calls reaches
    ``min_draws`` (at most ``max_calls`` calls), then hands every ``(inputs, outputs)`` pair of the shape
    to ``test``, with tensors on the judge's device (the GPU in a cuda run: the test may work there).
    ``test`` returns failure details (an empty list passes).
    ``test`` must reject at no more than ``false_reject_rate`` when the kernel is honest. The judge applies
    it to each shape's correctness calls and to its timed calls, pooled; a failure is confirmed on a second,
    independent set of calls (a second measurement for the timed ones) before the candidate is rejected,
    so an honest kernel fails an application at the square of that rate, while a bias the test sees once
    it sees again.
    """

    test: Callable[[list[tuple[tuple, tuple]]], list[str]]
    draws: Callable[[Shape], int]
    min_draws: int = 4096
    max_calls: int = 64
    false_reject_rate: float = 1e-4


@dataclass(frozen=True)
class Cost:
    """The fewest bytes a kernel must move and the FLOPs it must do for one call."""

    bytes: float
    flops: float = 0.0


@dataclass(frozen=True)
class ShapeRange:
    """Held-out shapes: each dimension is a list of choices or an inclusive ``(low, high)`` range.

    ``fixed`` dimensions are copied as they are; ``odd`` asks for odd draws from ranges so kernels that
    assume powers of two are caught.
    """

    dims: Mapping[str, Sequence[int] | tuple[int, int]]
    count: int = 2
    odd: bool = True

    def draw(self, rng: random.Random) -> list[dict[str, int]]:
        shapes = []
        for _ in range(self.count):
            shape = {}
            for name, spec in self.dims.items():
                if isinstance(spec, tuple) and len(spec) == 2:
                    low, high = spec
                    value = rng.randint(low, high)
                    if self.odd and value % 2 == 0 and value + 1 <= high:
                        value += 1
                    shape[name] = value
                else:
                    shape[name] = rng.choice(list(spec))
            shapes.append(shape)
        return shapes


@dataclass(frozen=True)
class ShapeSet:
    """The shapes judged on one kind of device: the public list and the held-out ranges."""

    public: Sequence[Shape]
    held_out: ShapeRange | None = None


@dataclass(frozen=True)
class Task:
    """What to optimize. See docs/tasks.md for a complete example.

    reference(*inputs) -> outputs: the meaning of the op. The judge calls it on inputs upcast to
        ``reference_dtype`` in a process the candidate never sees.
    make_inputs(shape, dtype, device, generator) -> tuple: the arguments of ``kernel(...)``; tensors
        must be drawn from ``generator`` so two processes make the same inputs from the same seed.
    gpu / cpu: the shape sets per kind of device.
    check: how outputs are compared: None for the ``tolerances`` table per dtype (the default), a
        callable ``check(inputs, outputs, reference_outputs, dtype) -> list[str]`` returning failure
        details (tensors on the CPU, reference in ``reference_dtype``), or a ``StatisticalRule``.
    cost(shape, dtype) -> Cost: the roofline's numerator.
    weight(shape) -> float: how much of the real workload this shape is (geometric-mean weights).
    forbidden: names of ops (as the profiler lists them, e.g. ``aten::softmax``) the candidate may not
        run, because they are the op the task is about.
    """

    name: str
    reference: Callable[..., Any]
    make_inputs: Callable[[Shape, torch.dtype, str, torch.Generator], tuple]
    gpu: ShapeSet
    cpu: ShapeSet
    dtypes: Sequence[torch.dtype] = (torch.float32,)
    cost: Callable[[Shape, torch.dtype], Cost] | None = None
    weight: Callable[[Shape], float] | None = None
    check: Any = None
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    reference_dtype: torch.dtype = torch.float64
    forbidden: Sequence[str] = ()
    description: str = ""
    source_path: str | None = None
    seeds_dir: str | None = None

    def shape_set(self, device: str) -> ShapeSet:
        return self.cpu if device == "cpu" else self.gpu

    def shape_weight(self, shape: Shape) -> float:
        return float(self.weight(shape)) if self.weight else 1.0

    def shape_cost(self, shape: Shape, dtype: torch.dtype) -> Cost | None:
        return self.cost(shape, dtype) if self.cost else None

    def seeds(self) -> list[Path]:
        """Seed candidate files shipped with the task, sorted by name."""
        if not self.seeds_dir or not Path(self.seeds_dir).is_dir():
            return []
        return sorted(p for p in Path(self.seeds_dir).glob("*.py") if not p.name.startswith("_"))

    def seeds_for(self, device: str) -> list[Path]:
        """The seeds a run on ``device`` starts from, by file name: on the CPU no ``triton``/``cuda``
        seeds (the interpreter is for correctness, not speed), on a GPU no ``cpu`` seeds; all of them
        when that would leave none. On a GPU the ``cuda`` seeds come last: their first call waits for
        nvcc (tens of seconds), and a run records its verdicts in proposal order, so a CUDA seed first
        would hold back every verdict behind its build."""
        paths = self.seeds()
        gpu_only, cpu_only = ("triton", "cuda"), ("cpu",)
        fit = [p for p in paths if not p.name.startswith(gpu_only if device == "cpu" else cpu_only)]
        if device != "cpu":
            fit.sort(key=lambda p: p.name.startswith("cuda"))  # stable: by name within each group
        return fit or paths


# Hidden sizes of the models the built-in tasks serve, from their public configs.
LLM_HIDDEN_SIZES = (4096, 7168, 8192)  # Llama-3-8B, DeepSeek-V3, Llama-3-70B
DECODE_TOKENS_MAX = 256


def decode_weight(tokens: int) -> float:
    """A shape's weight by its token count. Decode steps (up to 256 tokens, one per sequence of the
    batch) run once per generated token, on the latency-critical path; in prefill the GEMMs and
    attention around an op dominate the step. So decode shapes weigh 1 and prefill shapes 0.5."""
    return 1.0 if tokens <= DECODE_TOKENS_MAX else 0.5


def tensor_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes of a dense tensor: a helper for cost models."""
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def builtin_task_names() -> list[str]:
    return sorted(p.parent.name for p in BUILTIN_TASKS_DIR.glob("*/task.py"))


def load_task(spec: str) -> Task:
    """Load a task by built-in name, by task-file path, or from a KernelBench problem file."""
    path = Path(spec)
    shown = _one_line(spec)[:200]
    try:
        if spec in builtin_task_names():
            path = BUILTIN_TASKS_DIR / spec / "task.py"
        elif not path.exists():
            names = ", ".join(builtin_task_names())
            raise TaskError(f"unknown task '{shown}': not a built-in task ({names}) nor an existing file")
        if path.is_dir():
            if not (path / "task.py").is_file():
                raise TaskError(f"{shown} is a folder without a task.py")
            path = path / "task.py"
        if not path.is_file():
            raise TaskError(f"{shown} is not a file")
    except (OSError, ValueError) as exc:  # a name too long, a null byte, no permission
        raise TaskError(f"cannot read the task '{shown}': {_one_line(exc)[:200]}") from None
    module = _import_file(path, "ratchet_task_")
    try:
        task = getattr(module, "TASK", None)
        kernelbench = task is None and hasattr(module, "Model") and hasattr(module, "get_inputs")
    except Exception as exc:  # a module __getattr__ of the user's that raises
        raise TaskError(f"{path}: reading TASK failed: {type(exc).__name__}: {_one_line(exc)}") from None
    if kernelbench:
        from ratchet.kernelbench import task_from_kernelbench

        try:
            return task_from_kernelbench(module, path)
        except Exception as exc:  # the problem file's objects are the user's code
            raise TaskError(f"{path}: not a usable KernelBench problem: {type(exc).__name__}: {_one_line(exc)}") from None
    if not isinstance(task, Task):
        raise TaskError(f"{path}: defines no TASK = Task(...) (nor a KernelBench Model/get_inputs)")
    seeds = task.seeds_dir or str(path.parent / "seeds")
    # Absolute as the user named it, symlinks kept: commands a brief or program.md prints then use the
    # user's own paths (every comparison of task files resolves both sides).
    return _with(task, source_path=os.path.abspath(path), seeds_dir=seeds)


def _with(task: Task, **changes) -> Task:
    from dataclasses import replace

    return replace(task, **changes)


def _import_file(path: Path, prefix: str):
    """Import a Python file as a fresh module; any failure becomes a one-line TaskError."""
    name = prefix + str(abs(hash(str(path.resolve()))))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # the user's file: report, never crash (nor exit quietly)
        sys.modules.pop(name, None)
        raise TaskError(f"{path}: failed to import: {type(exc).__name__}: {_one_line(exc)}") from None
    return module


def _one_line(text) -> str:
    return " ".join(str(text).split())[:300]
