"""Compile a Triton candidate for Hopper (sm_90) on a machine without a GPU, as its launches would be compiled.

Run as a script (``python tests/hopper_compile.py TASK CANDIDATE``, TRITON_INTERPRET unset): the candidate's
``kernel`` is called at each of the task's GPU public shapes (first dtype) with its own defaults, and at the
heaviest of them (by the task's cost model) with the valid configs of its SPACE on their frontier (those no
other config matches or exceeds in every numeric knob: shared memory grows with tiles, stages and warps;
``--full``: every config at every shape), on CPU tensors of the right shapes and dtypes (empty: their values are never read by a compile), while a
stand-in driver tells Triton the device is an sm_90 GPU and every launch is turned into a compile only
(``warmup``). Triton specializes each launch on the real arguments (dtypes, 16-byte alignment, integer
divisibility), so what it compiles is what the GPU would. Prints one JSON object: each launch's kernel name
and shared memory, and the calls that raised.

``--alias J=I`` passes input I again as input J, as a model can (DeepSeek's MLA hands its latent cache to
decode_attention as both k_cache and v_cache), for kernels that take another path then.
"""

from __future__ import annotations

import json
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("hopper_compile.py: run with TRITON_INTERPRET unset (interpreted functions cannot be compiled)")

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from ratchet.candidate import load_candidate  # noqa: E402
from ratchet.task import load_task  # noqa: E402


class HopperStandIn:
    """What Triton asks the driver while compiling a launch: the device, its stream and its target."""

    target = GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        return torch.device("cpu")


def _inputs(task, shape):
    """The task's inputs at ``shape`` as empty CPU tensors: structure from make_inputs on the meta device
    (or on the CPU where make_inputs reads a value back, as rmsnorm's eps)."""
    dtype = task.dtypes[0]
    try:
        made = task.make_inputs(shape, dtype, "meta", torch.Generator())
    except RuntimeError:
        made = task.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(0))
    return tuple(torch.empty(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x for x in made)


def compile_candidate(task_name: str, path: str, alias: tuple[int, int] | None = None, full: bool = False) -> dict:
    import importlib.util

    task = load_task(task_name)
    spec = importlib.util.spec_from_file_location("hopper_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    launches, errors = [], []
    current = {}
    plain_run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        compiled = plain_run(self, *args, grid=grid, warmup=True, **kwargs)
        launches.append({"kernel": self.fn.__name__, "shared": compiled.metadata.shared,
                         "num_warps": compiled.metadata.num_warps, "num_stages": compiled.metadata.num_stages,
                         **current})
        return compiled

    driver.set_active(HopperStandIn())
    JITFunction.run = compile_only
    configs = load_candidate(path).valid_configs()
    if not full:
        configs = frontier(configs)
    heaviest = max(task.gpu.public, key=lambda s: _size(task, s))
    try:
        for shape in task.gpu.public:
            inputs = _inputs(task, shape)
            if alias:
                inputs = tuple(inputs[alias[1]] if i == alias[0] else x for i, x in enumerate(inputs))
            # Lean: the kernel's own defaults at every shape, the frontier configs at the heaviest one (a
            # config's tiles grow with the shape); each distinct specialization is a compile of seconds.
            for config in configs if full or shape == heaviest else [{}]:
                current.update(shape=shape, config=config)
                try:
                    module.kernel(*inputs, **config)
                except Exception as exc:  # noqa: BLE001  (reported, one line each)
                    errors.append({"shape": shape, "config": config, "error": f"{type(exc).__name__}: {exc}"[:500]})
    finally:
        JITFunction.run = plain_run
    return {"launches": launches, "errors": errors}


def frontier(configs: list[dict]) -> list[dict]:
    """The configs no other config of the same non-numeric knobs matches or exceeds in every numeric knob:
    shared memory grows with tile sizes, stages and warps, so these bound the rest."""
    def numeric(config):
        return {k: v for k, v in config.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def dominated(a, b):  # b >= a in every numeric knob, and differs
        na, nb = numeric(a), numeric(b)
        same_kind = {k: v for k, v in a.items() if k not in na} == {k: v for k, v in b.items() if k not in nb}
        return same_kind and a != b and all(nb[k] >= na[k] for k in na)

    return [c for c in configs if not any(dominated(c, other) for other in configs)]


def _size(task, shape) -> float:
    """The shape's weight by the task's cost model (bytes, then flops), at the first dtype."""
    cost = task.cost(shape, task.dtypes[0]) if task.cost else None
    return (cost.bytes, cost.flops) if cost else tuple(shape.values())


if __name__ == "__main__":
    args = sys.argv[1:]
    full = "--full" in args
    args = [a for a in args if a != "--full"]
    aliased = None
    if len(args) == 4 and args[2] == "--alias":
        aliased = tuple(int(part) for part in args[3].split("="))
    print(json.dumps(compile_candidate(args[0], args[1], aliased, full)))
