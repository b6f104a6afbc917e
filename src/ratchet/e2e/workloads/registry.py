"""The op registry: every registered op of the workloads runs through here, so a kept kernel swaps in.

Ops are keyed by built-in task name and called with exactly that task's ``kernel(...)`` signature. The
default for each op is the task's own reference function, called on the workload's tensors as they are
(in their dtype: the same eager baseline the judge times). ``use(name, fn)`` swaps a function in for a
``with`` block; ``install(name, path, config)`` loads a candidate file (a kernel the judge kept) and swaps
its ``kernel`` in, with the config's values bound as keyword arguments. ``record()`` lists every call as
``OpCall(task, shape, dtype)`` with the shape in the task's own dimension names, for ``ratchet profile``.

Swap before a CUDA graph is captured: the graph holds the kernels that ran while it was captured.
``install`` imports the candidate file into this process, unlike the judge: it is for kernels the
judge already passed, never for untrusted code.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from ratchet.candidate import CandidateError, load_candidate
from ratchet.task import load_task


# Each op's shape in its task's dimension names, read from the arguments of a call.
def _rows(x, *_):
    return {"T": x.shape[0], "H": x.shape[1]}


def _silu_mul(x):
    return {"T": x.shape[0], "I": x.shape[1] // 2}


def _rope(q, k, cos, sin):
    return {"T": q.shape[0], "Hq": q.shape[1], "Hkv": k.shape[1], "D": q.shape[2]}


def _softmax(x):
    return {"M": x.shape[0], "N": x.shape[1]}


def _top_p(logits, top_p):
    return {"B": logits.shape[0], "V": logits.shape[1]}


def _moe_route(logits, bias):
    return {"T": logits.shape[0], "E": logits.shape[1]}


def _decode_attention(q, k_cache, v_cache, seq_lens):
    # L is the padded cache length; seq_lens (on the device) says how much of it each row reads.
    shape = {"B": q.shape[0], "Hq": q.shape[1], "Hkv": k_cache.shape[1], "L": k_cache.shape[2], "D": q.shape[2]}
    return shape if v_cache.shape[-1] == q.shape[2] else {**shape, "Dv": v_cache.shape[-1]}


SHAPES: Mapping[str, Callable[..., dict[str, int]]] = {
    "rmsnorm": _rows,
    "add_rmsnorm": _rows,
    "silu_mul": _silu_mul,
    "rope": _rope,
    "softmax": _softmax,
    "top_p_sampling": _top_p,
    "moe_route": _moe_route,
    "decode_attention": _decode_attention,
}
OPS = tuple(SHAPES)


@dataclass(frozen=True)
class OpCall:
    """One call of a registered op: the task, its shape in the task's dimension names, the dtype of its
    first tensor argument (the one the task's dtype list is about)."""

    task: str
    shape: dict[str, int]
    dtype: torch.dtype

    @property
    def key(self) -> tuple:
        """Hashable, for counting calls per (task, shape, dtype)."""
        return self.task, tuple(sorted(self.shape.items())), str(self.dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=None)
def reference(name: str) -> Callable[..., Any]:
    """The task's own reference function: the default of op ``name``."""
    _check_name(name)
    return load_task(name).reference


def load_kernel(path: str | Path, config: Mapping[str, Any] | None = None, op: str | None = None) -> Callable[..., Any]:
    """Import a candidate file's ``kernel`` with ``config`` (checked against its SPACE) bound.

    A config key missing from ``config`` takes the SPACE's default, as the judge does. Raises
    CandidateError for a file that defines no ``kernel`` (KernelBench ``ModelNew`` files included).
    With ``op`` (a workload op name) the kernel comes back as a torch custom op (``opaque_op``).
    """
    candidate = load_candidate(path)
    if candidate.kind != "ratchet":
        raise CandidateError(f"{path}: only files defining kernel(...) can go into a workload")
    resolved = candidate.resolve_config(config)
    name = f"ratchet_workload_kernel_{candidate.sha256[:16]}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, candidate.path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton and dataclasses look the module up by name
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules[name]
            raise
    kernel = getattr(module, "kernel", None)
    if not callable(kernel):
        raise CandidateError(f"{path}: kernel is not callable")
    bound = functools.partial(kernel, **resolved) if resolved else kernel
    if op is not None:
        config_key = hashlib.sha256(repr(sorted(resolved.items())).encode()).hexdigest()[:8]
        return opaque_op(op, bound, f"{candidate.sha256[:16]}_{config_key}")
    # Opaque to torch.compile: the judge passed the kernel as it runs eagerly, so a compiled model must
    # run it the same way, not trace into it (Inductor would re-specialize a Triton kernel on its own
    # argument types: on the H200 (2026-11-30) the split-K decode-attention seed got its float scale as
    # fp64 there and failed to compile ("loop-carried variable m ... fp32 ... re-assigned to fp64").
    # The cost is one graph break per call; opaque_op avoids it where the op is known.
    return torch.compiler.disable(bound)


# Each op's signature as a torch custom op: what a compiled model sees of an installed kernel.
SCHEMAS: Mapping[str, str] = {
    "rmsnorm": "(Tensor x, Tensor weight, float eps) -> Tensor",
    "add_rmsnorm": "(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)",
    "silu_mul": "(Tensor x) -> Tensor",
    "rope": "(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)",
    "softmax": "(Tensor x) -> Tensor",
    "top_p_sampling": "(Tensor logits, Tensor top_p) -> Tensor",
    "moe_route": "(Tensor logits, Tensor bias) -> (Tensor, Tensor)",
    "decode_attention": "(Tensor q, Tensor k_cache, Tensor v_cache, Tensor seq_lens) -> Tensor",
}
_LIBRARY: torch.library.Library | None = None
_OPAQUE: dict[str, Callable[..., Any]] = {}


def opaque_op(op: str, fn: Callable[..., Any], key: str) -> Callable[..., Any]:
    """``fn`` as the custom op ``torch.ops.ratchet.<op>_<key>``: torch.compile keeps it in the graph as one
    opaque call (no graph break, no tracing into the kernel), and works out its outputs' shapes and dtypes
    by running the task's reference on fake tensors.

    ``torch.compiler.disable`` instead breaks the compiled graph at every call of the op. A kernel must
    not write its inputs or return them (the judge refuses both), which is what a custom op without
    ``mutates_args`` promises.
    """
    global _LIBRARY
    qualname = f"{op}_{key}"
    if qualname in _OPAQUE:
        return _OPAQUE[qualname]
    schema = SCHEMAS[op]
    returns_tuple = schema.rstrip().endswith(")")
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("ratchet", "FRAGMENT")  # lives as long as the process

    def run(*args):
        out = fn(*args)
        if returns_tuple:
            return tuple(out)
        return out[0] if isinstance(out, (tuple, list)) else out

    def fake(*args):
        out = reference(op)(*args)
        return tuple(out) if returns_tuple else out

    _LIBRARY.define(qualname + schema)
    _LIBRARY.impl(qualname, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"ratchet::{qualname}", fake, lib=_LIBRARY)
    _OPAQUE[qualname] = getattr(torch.ops.ratchet, qualname)
    return _OPAQUE[qualname]


def _check_name(name: str) -> None:
    if name not in SHAPES:
        raise KeyError(f"no workload op '{name}' (ops: {', '.join(OPS)})")


class OpRegistry:
    """Maps op names to the functions that run them; the workloads call ops only through one of these."""

    def __init__(self) -> None:
        self._impls: dict[str, Callable[..., Any]] = {}
        # Ops of this registry beyond the built-in ones: a module task's whole module, routed here by
        # ratchet.e2e.models.module_route (name -> its task's reference).
        self._module_ops: dict[str, Callable[..., Any]] = {}
        self._module_dims: dict[str, tuple[str, ...]] = {}  # a module op's named leading dims of its first input
        self._recorders: list[list[OpCall]] = []
        # The op running now, left set when it raises: says which op broke a CUDA graph capture.
        self.active: str | None = None
        # Looked up here, not on each call: a compiled step traces call(), and reference()'s first lookup
        # (loading the task, a glob of the task folder) broke the graph at every op, the torch.compile
        # baseline of the e2e tables included (found 2026-11-30 (MLA kernel); docs/NOTES.md).
        self._references = {name: reference(name) for name in OPS}

    # -- the ops ---------------------------------------------------------------------------------------
    def add_module_op(self, name: str, reference_fn: Callable[..., Any], dims: tuple[str, ...] = ()) -> None:
        """Make ``name`` an op of this registry with ``reference_fn`` as its default: a module task, whose
        kernel replaces a whole module of the model (its tensor inputs, then its weights). ``dims``: the
        task's names for the leading dimensions of the first input, which a recorded call's shape uses."""
        if name in SHAPES:
            raise ValueError(f"'{name}' is a built-in op, not a module op")
        self._module_ops[name] = reference_fn
        self._module_dims[name] = tuple(dims)

    @property
    def ops(self) -> tuple[str, ...]:
        """Every op of this registry: the built-in ones, then its module ops."""
        return OPS + tuple(self._module_ops)

    def reference_of(self, name: str) -> Callable[..., Any]:
        """Op ``name``'s default: its task's reference."""
        self._check(name)
        return self._references.get(name) or self._module_ops[name]

    def _check(self, name: str) -> None:
        if name not in SHAPES and name not in self._module_ops:
            raise KeyError(f"no workload op '{name}' (ops: {', '.join(self.ops)})")

    # -- choosing implementations --------------------------------------------------------------------
    def get(self, name: str) -> Callable[..., Any]:
        self._check(name)
        return self._impls.get(name) or self.reference_of(name)

    def set(self, name: str, fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        """Make ``fn`` run op ``name`` (None: back to the reference); returns what was set before."""
        self._check(name)
        previous = self._impls.get(name)
        if fn is None:
            self._impls.pop(name, None)
        else:
            self._impls[name] = fn
        return previous

    def reset(self) -> None:
        """Every op back to its reference."""
        self._impls.clear()

    @contextlib.contextmanager
    def use(self, name: str, fn: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
        """``with registry.use("rmsnorm", my_kernel): ...``: swapped in for the block, restored after."""
        previous = self.set(name, fn)
        try:
            yield fn
        finally:
            self.set(name, previous)

    def install(self, name: str, path: str | Path, config: Mapping[str, Any] | None = None) -> "_Installed":
        """Load candidate file ``path`` (with ``config``) and make it run op ``name`` from now on.

        Returns a handle: ``handle.restore()`` (or using it as a context manager) puts back what ran
        before.
        """
        self._check(name)
        kernel = load_kernel(path, config, op=name if name in SHAPES else None)
        return _Installed(self, name, kernel, self.set(name, kernel))

    @property
    def recording(self) -> bool:
        """Whether a ``record()`` block is open."""
        return bool(self._recorders)

    # -- recording -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def record(self) -> Iterator[list[OpCall]]:
        """``with registry.record() as calls: ...``: every op call in the block, in order. Calls made
        while a CUDA graph is captured are recorded once (a replay runs no Python)."""
        calls: list[OpCall] = []
        self._recorders.append(calls)
        try:
            yield calls
        finally:
            self._recorders.remove(calls)

    # -- calling -------------------------------------------------------------------------------------
    def call(self, name: str, *args: Any) -> Any:
        fn = self._impls.get(name) or self._references.get(name) or self._module_ops[name]
        if self._recorders:
            # A module op's shape: its task's named leading dims of the first input (B, S or T).
            shape = SHAPES[name](*args) if name in SHAPES else dict(zip(self._module_dims[name], args[0].shape))
            call = OpCall(name, shape, args[0].dtype)
            for calls in self._recorders:
                calls.append(call)
        self.active = name
        out = fn(*args)
        self.active = None
        return out

    # The ops, with their tasks' signatures (docs/tasks.md and docs/design.md's table).
    def rmsnorm(self, x, weight, eps):
        return self.call("rmsnorm", x, weight, eps)

    def add_rmsnorm(self, x, residual, weight, eps):
        return self.call("add_rmsnorm", x, residual, weight, eps)

    def silu_mul(self, x):
        return self.call("silu_mul", x)

    def rope(self, q, k, cos, sin):
        return self.call("rope", q, k, cos, sin)

    def softmax(self, x):
        return self.call("softmax", x)

    def top_p_sampling(self, logits, top_p):
        return self.call("top_p_sampling", logits, top_p)

    def moe_route(self, logits, bias):
        return self.call("moe_route", logits, bias)

    def decode_attention(self, q, k_cache, v_cache, seq_lens):
        return self.call("decode_attention", q, k_cache, v_cache, seq_lens)


class _Installed:
    """What ``install`` returns: the loaded kernel, and a way to put back what ran before."""

    def __init__(self, registry: OpRegistry, name: str, kernel: Callable[..., Any], previous) -> None:
        self.registry, self.name, self.kernel, self._previous = registry, name, kernel, previous

    def restore(self) -> None:
        self.registry.set(self.name, self._previous)

    def __enter__(self) -> Callable[..., Any]:
        return self.kernel

    def __exit__(self, *exc) -> None:
        self.restore()


REGISTRY = OpRegistry()
"""The registry the workloads use unless they are given another."""


def use(name: str, fn: Callable[..., Any]):
    """``with use("rmsnorm", fn): ...`` on the default registry."""
    return REGISTRY.use(name, fn)


def install(name: str, path: str | Path, config: Mapping[str, Any] | None = None) -> _Installed:
    """Load a candidate file into the default registry (see ``OpRegistry.install``)."""
    return REGISTRY.install(name, path, config)


def record():
    """``with record() as calls: ...`` on the default registry."""
    return REGISTRY.record()
