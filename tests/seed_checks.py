"""The checks every row-wise task's seeds get: each seed against the float64 reference on the test shapes
in every dtype (the cpu_torch seed at each CHUNK of its SPACE), every Triton config on odd shapes, and no
seed writing into its inputs (an fp32 ``.to()`` aliases them, so a seed that writes its scratch there
would corrupt the caller's tensors).

A task's test file subclasses :class:`SeedChecks` as ``TestSeeds`` with the task's settings as class
arguments; pytest then runs the inherited tests for that task, parametrized by
:meth:`SeedChecks.pytest_generate_tests`. The Triton seeds come from the module-scoped ``triton_seed``
fixture that :func:`triton_seed_fixture` makes.
"""

import functools
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import load_task
from seed_files import import_seed, require_triton


def shape_id(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def cpu_inputs(task, shape, dtype, seed=0):
    """The task's inputs for ``shape`` on the CPU, from a generator seeded with ``seed``."""
    return task.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(seed))


def assert_close(task, out, ref, dtype, shape):
    """``out`` has ``dtype`` and ``shape`` and lies within the task's tolerance for ``dtype`` of ``ref``."""
    assert out.dtype == dtype and out.shape == shape
    tol = task.tolerances[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol)


def assert_matches_reference(task, outputs, inputs, dtype):
    """Every output has ``dtype``, the shape of its float64 reference output, and its values within the
    task's tolerance; a task with several outputs returns a tuple of them."""
    refs = task.reference(*(t.double() if isinstance(t, torch.Tensor) else t for t in inputs))
    if isinstance(refs, tuple):
        assert isinstance(outputs, tuple) and len(outputs) == len(refs)
    else:
        outputs, refs = (outputs,), (refs,)
    for out, ref in zip(outputs, refs):
        assert_close(task, out, ref, dtype, ref.shape)


def untouched(inputs, kernel, **config):
    """``kernel(*inputs, **config)``, asserting that it wrote into none of the input tensors."""
    before = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    outputs = kernel(*inputs, **config)
    assert all(torch.equal(a, b) for a, b in zip(inputs, before) if isinstance(a, torch.Tensor))
    return outputs


def triton_seed_fixture(task_name: str, names):
    """A module-scoped fixture giving (name, module) of each Triton seed in turn, skipped where Triton
    cannot run."""

    @pytest.fixture(scope="module", params=list(names))
    def triton_seed(request):
        require_triton()
        return request.param, import_seed(task_name, request.param)

    return triton_seed


@functools.lru_cache(maxsize=None)
def _task(name):
    return load_task(name)


class SeedChecks:
    """The seed tests of one task. The class arguments: ``task``, its name; ``shapes``, where every seed is
    checked in every dtype of the task; ``odd_shapes``, where every config of each Triton seed is checked
    (odd sizes, wider than every block); ``most_configs``, a bound on that test's time under the
    interpreter."""

    def __init_subclass__(cls, *, task: str, shapes: list, odd_shapes: list, most_configs: int, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.task_name, cls.shapes, cls.odd_shapes, cls.most_configs = task, shapes, odd_shapes, most_configs

    def check(self, outputs, inputs, dtype):
        """Assert that ``outputs`` are the task's answer for ``inputs``."""
        assert_matches_reference(_task(self.task_name), outputs, inputs, dtype)

    def pytest_generate_tests(self, metafunc):
        if "shape" in metafunc.fixturenames:
            metafunc.parametrize("shape", self.shapes, ids=shape_id)
        if "dtype" in metafunc.fixturenames:
            metafunc.parametrize("dtype", _task(self.task_name).dtypes)
        if "odd_shape" in metafunc.fixturenames:
            metafunc.parametrize("odd_shape", self.odd_shapes, ids=shape_id)

    def _inputs(self, shape, dtype, seed):
        return cpu_inputs(_task(self.task_name), shape, dtype, seed)

    def _candidate(self, name):
        return load_candidate(Path(_task(self.task_name).seeds_dir) / f"{name}.py")

    def test_cpu_seed_matches_reference(self, shape, dtype):
        module = import_seed(self.task_name, "cpu_torch")
        inputs = self._inputs(shape, dtype, seed=0)
        for chunk in self._candidate("cpu_torch").space["CHUNK"]:
            self.check(untouched(inputs, module.kernel, CHUNK=chunk), inputs, dtype)

    def test_triton_seeds_match_reference(self, triton_seed, shape, dtype):
        inputs = self._inputs(shape, dtype, seed=1)
        self.check(untouched(inputs, triton_seed[1].kernel), inputs, dtype)

    def test_every_triton_config_is_correct_on_odd_shapes(self, triton_seed, odd_shape):
        name, module = triton_seed
        inputs = self._inputs(odd_shape, torch.bfloat16, seed=2)
        configs = self._candidate(name).all_configs()
        assert 1 < len(configs) <= self.most_configs
        for config in configs:
            self.check(module.kernel(*inputs, **config), inputs, torch.bfloat16)
