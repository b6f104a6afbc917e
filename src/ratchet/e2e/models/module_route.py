"""Route a model's modules of one class through a module task's op: the swap that lets the gate and the
stack put a module task's kernel (``ratchet profile --extract`` wrote its task, a whole module as one
op) into the model it came from.

``route_module(model, registry, op, task_path)`` reads the task file's call spec (``_SPEC``: the
module's class, its inputs as profiled, its weights by name), makes ``op`` a module op of ``registry``,
and gives every instance of that class whose weights have the task's names and shapes a forward that
calls ``registry.call(op, *tensor inputs, *weights)``. The op's default is the calling module's own
forward, unchanged: the baseline the gate and the stack time is the model as it was, not the task's
reference (which rebuilds the module for every call). As the adapter does, the swap is made only where
the task means what the module does: each instance is probed once, its own forward against the task's
reference on the task's inputs (its smallest CPU shape, in the module's dtype, with the module's own
weights), and kept as it is when they differ. At call time a call
the task never saw (an argument it did not record, a constant with another value, a tensor of another
rank) runs the module's own forward. ``restore()`` puts every forward back.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ratchet.e2e.models.adapter import close
from ratchet.e2e.workloads.registry import OpRegistry
from ratchet.e2e.workloads.swaps import Undoable, set_forward
from ratchet.task import TaskError, _import_file


class ModuleRouteError(Exception):
    """The task is no module task, or nothing in the model can take its kernel (one line)."""


@dataclass
class ModuleRoute(Undoable):
    """What ``route_module`` did: the instances routed, those left alone (with why), and ``restore()``."""

    op: str
    module_class: str
    routed: list = field(default_factory=list)  # module names
    kept: list = field(default_factory=list)  # (module name, why it was not routed)
    _undo: list = field(default_factory=list, repr=False)


def load_task_module(task_path: str | Path):
    """The task file as a module (its ``_SPEC``, ``_import``, ``reference``, ``TASK``)."""
    try:
        return _import_file(Path(task_path), "ratchet_module_task_")
    except TaskError as exc:
        raise ModuleRouteError(str(exc)) from None


def _module_spec(task_module) -> dict | None:
    """The task file's call spec of a module, or None when it is no module task."""
    spec = getattr(task_module, "_SPEC", None)
    return spec if isinstance(spec, dict) and {"source", "inputs", "weights"} <= set(spec) else None


def kernel_parameters(spec: dict) -> list[str]:
    """A module task's kernel parameters, in order: the module's tensor inputs (keyword names, else x0,
    x1, ...), then its weights (dots as underscores)."""
    names = [(i["key"] or f"x{n}") for n, i in enumerate(spec["inputs"]) if "const" not in i]
    return names + [w[0].replace(".", "_") for w in spec["weights"]]


def loaded_module_task(task):
    """The loaded file of ``task`` when it is a module task (its reference runs a model's module), else
    None: its docstring holds the module's math, which the reference's own body (``_run(*arguments)``)
    does not show."""
    import sys

    module = sys.modules.get(getattr(task.reference, "__module__", "") or "")
    return module if module is not None and _module_spec(module) is not None else None


def is_module_task(task_path: str | Path | None) -> bool:
    """Whether ``task_path`` is a task file written by ``extract_module`` (a whole module as one op)."""
    if not task_path or not Path(task_path).is_file():
        return False
    try:
        return _module_spec(load_task_module(task_path)) is not None
    except ModuleRouteError:
        return False


def call_arguments(items: list[dict], tensors) -> tuple[list, dict]:
    """A module's forward arguments from a task's call spec (``_SPEC["inputs"]``) and its tensor inputs in
    order: positional and keyword as profiled, constants as recorded."""
    args, kwargs, left = [], {}, list(tensors)
    for item in items:
        value = item["const"] if "const" in item else left.pop(0)
        if item["key"] is None:
            args.append(value)
        else:
            kwargs[item["key"]] = value
    return args, kwargs


def _same_class(module: nn.Module, cls: type) -> bool:
    # A user's model file is imported again by the task under another module name: the class is the same
    # when its name and its source file are.
    kind = type(module)
    if kind is cls:
        return True
    if kind.__qualname__ != cls.__qualname__:
        return False
    try:
        return inspect.getfile(kind) == inspect.getfile(cls)
    except TypeError:
        return False


def _weights_of(module: nn.Module, weights: list) -> list[torch.Tensor] | str:
    """The module's own tensors for the task's weight names, or why they do not fit."""
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    out = []
    for name, shape, *_ in weights:
        tensor = state.get(name)
        if tensor is None:
            return f"it has no weight '{name}'"
        if list(tensor.shape) != list(shape):
            return f"its {name} is {list(tensor.shape)}, the task's {list(shape)}"
        out.append(tensor)
    return out


class _Call:
    """How a module's forward arguments map to the task's tensor inputs: by parameter name, positional
    inputs of the profiled call by their place in the forward's signature."""

    def __init__(self, forward: Callable, items: list[dict]):
        self.signature = inspect.signature(forward)
        params = [p for p in self.signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.items, self.names, place = items, [], 0
        for item in items:
            if item["key"] is None:
                if place >= len(params):
                    raise ModuleRouteError("the task's call has more positional inputs than the forward takes")
                self.names.append(params[place].name)
                place += 1
            else:
                self.names.append(item["key"])
        self.var_keyword = next((p.name for p in self.signature.parameters.values() if p.kind == p.VAR_KEYWORD), None)
        # The common call, every input a positional tensor as profiled (an MLP's x): checked without
        # binding the signature, which costs more than a small module's kernel saves.
        self.plain = all(item["key"] is None and "const" not in item for item in items)
        self.ranks = [len(item.get("shape", ())) for item in items]

    def tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
        """The task's tensor inputs of this call, or None when the call is not one the task covers."""
        if self.plain and not kwargs and len(args) == len(self.ranks):
            if all(isinstance(a, torch.Tensor) and a.dim() == r for a, r in zip(args, self.ranks)):
                return list(args)
            return None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        given = dict(bound.arguments)
        if self.var_keyword is not None:
            given.update(given.pop(self.var_keyword, {}))
        if set(given) - set(self.names):
            return None
        out = []
        for item, name in zip(self.items, self.names):
            if name in given:
                value = given[name]
            else:
                param = self.signature.parameters.get(name)
                value = param.default if param is not None and param.default is not param.empty else None
            if "const" in item:
                if isinstance(value, torch.Tensor) or value != item["const"]:
                    return None
            elif not isinstance(value, torch.Tensor) or value.dim() != len(item["shape"]):
                return None
            else:
                out.append(value)
        return out


class _OwnForward:
    """The module op's default: the forward of the module being called, on the call's own arguments (the
    routed forward says which, around its ``registry.call``)."""

    def __init__(self):
        self.calls: list[tuple[Callable, tuple, dict]] = []

    def __call__(self, *_tensors_and_weights):
        original, args, kwargs = self.calls[-1]
        return original(*args, **kwargs)


def _routed_forward(registry: OpRegistry, op: str, own: _OwnForward, call: _Call, original: Callable,
                    weights: list[torch.Tensor], as_tuple: bool):
    def forward(self, *args, **kwargs):
        # With the op's default chosen the model runs as it was, at no routing cost: a baseline timed
        # through the route would be slower than the model by the route (10 us a call on a tiny Gemma MLP).
        if registry.get(op) is own and not registry.recording:
            return original(*args, **kwargs)
        tensors = call.tensors(args, kwargs)
        if tensors is None:  # a call the task never saw: the module's own
            return original(*args, **kwargs)
        own.calls.append((original, args, kwargs))
        try:
            out = registry.call(op, *tensors, *weights)
        finally:
            own.calls.pop()
        if as_tuple:
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return out[0] if isinstance(out, (tuple, list)) else out

    return forward


def _probe_inputs(task_module, module: nn.Module, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """The task's inputs at its first CPU shape's token counts and the model's own widths: a wide module's
    CPU set is the module narrowed (hidden width W), and the model's instance has the model's widths (on
    an H100, 2026-12-07, Qwen3-MoE's narrowed inputs could drive no block of the model, so its gate
    routed nothing)."""
    task = task_module.TASK
    shape = {k: v for k, v in (task.cpu.public[0] if task.cpu is not None else task.gpu.public[0]).items()
             if k != "W"}
    like = weights[0] if weights else next(module.parameters())
    generator = torch.Generator(device="cpu").manual_seed(11)
    n_in = sum(1 for item in task_module._SPEC["inputs"] if "const" not in item)
    made = task.make_inputs(shape, like.dtype, "cpu", generator)[:n_in]
    return [t.to(like.device) for t in made]


def _output_kind(out: Any) -> str | None:
    """'tensor' or 'tuple' for what a routed forward can give back, else None."""
    if isinstance(out, torch.Tensor):
        return "tensor"
    if isinstance(out, tuple) and out and all(isinstance(o, torch.Tensor) for o in out):
        return "tuple"
    return None


def route_module(model: nn.Module, registry: OpRegistry, op: str, task_path: str | Path) -> ModuleRoute:
    """Route every instance of the task's module class in ``model`` through ``registry``'s op ``op``
    (added as a module op); raises ModuleRouteError when the task is none or no instance could be routed."""
    task_module = load_task_module(task_path)
    spec = _module_spec(task_module)
    if spec is None:
        raise ModuleRouteError(f"{task_path}: not a module task (no call spec of a module)")
    cls = task_module._import(spec["source"])
    result = ModuleRoute(op, f"{cls.__module__}.{cls.__qualname__}")
    own = _OwnForward()
    registry.add_module_op(op, own, tuple(spec.get("names", ())))
    for name, module in model.named_modules():
        if not _same_class(module, cls):
            continue
        weights = _weights_of(module, spec["weights"])
        if isinstance(weights, str):
            result.kept.append((name, weights))
            continue
        original = module.forward
        try:
            call = _Call(original, spec["inputs"])
            inputs = _probe_inputs(task_module, module, weights)
            args, kwargs = call_arguments(spec["inputs"], inputs)
            with torch.no_grad():
                want = original(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (a module the task's inputs cannot drive is left alone)
            result.kept.append((name, f"its forward does not run on the task's inputs: {type(exc).__name__}: {exc}"))
            continue
        kind = _output_kind(want)
        if kind is None:
            result.kept.append((name, f"its forward returns {type(want).__name__}, not tensors"))
            continue
        try:
            with torch.no_grad():
                got = task_module.reference(*inputs, *weights)
        except Exception as exc:  # noqa: BLE001
            result.kept.append((name, f"the task's reference does not run here: {type(exc).__name__}: {exc}"))
            continue
        wants = (want,) if kind == "tensor" else want
        gots = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        if len(wants) != len(gots) or not all(close(w, g) for w, g in zip(wants, gots)):
            result.kept.append((name, "the task's reference differs from its forward on the same inputs"))
            continue
        forward = _routed_forward(registry, op, own, call, original, weights, kind == "tuple")
        set_forward(result, module, forward)
        result.routed.append(name)
    if not result.routed:
        why = "; ".join(f"{n}: {w}" for n, w in result.kept[:3]) or "the model has no instance of it"
        raise ModuleRouteError(f"no {result.module_class} of the model can run {op}'s kernel ({why})")
    return result
