"""Which of a model's own modules hold time that no task covers: the module side of ``ratchet profile``.

While a phase is profiled, every submodule of the model (the root and containers aside) runs inside a
profiler range ``ratchet::module:<i>`` opened by a forward pre-hook (which also records the call: each
argument a tensor's shape, dtype and, for integer tensors, value range, or a constant) and closed by a
forward hook. ``_attribute`` looks through these ranges, so the op table is unchanged. Per module, its
time per step and the part of it spent in ops that neither a registry op (a built-in task) nor an
op-family extractor (``ratchet.e2e.extract``) covers: its *uncovered* time.

A module is worth a task of its own when it runs an op that nothing covers (views aside), its time
reaches ``NOTABLE_SHARE`` of a step, and its forward takes only what a task can make (tensors and
plain constants: not a KV cache). Modules are
grouped by class and parameter shapes (the same block in every layer is one entry); a group is chosen
from the outside in (the MoE block, not its router inside it), looking inside modules whose call
cannot be remade (a decoder layer takes the cache, so its MLP is considered).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

MODULE_PREFIX = "ratchet::module:"
# Ops that move no data (views, metadata, allocation): a module made of covered ops and these is covered.
FREE_OPS = frozenset(f"aten::{n}" for n in (
    "view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "permute", "unsqueeze", "squeeze", "expand",
    "t", "slice", "select", "chunk", "split", "split_with_sizes", "unbind", "as_strided", "alias", "detach",
    "empty", "empty_strided", "unflatten", "flatten", "lift_fresh", "resolve_conj", "resolve_neg", "narrow"))
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)
_CONSTANTS = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class ArgSpec:
    """One argument of a recorded forward call: a tensor (``shape``, ``dtype``, integer ``low``/``high``)
    or a constant (``value``). ``key``: the keyword, or None for a positional argument."""

    key: str | None
    kind: str  # "tensor" or "const"
    shape: tuple = ()
    dtype: str | None = None
    low: int | None = None
    high: int | None = None
    value: Any = None

    def label(self) -> str:
        if self.kind == "tensor":
            return f"{list(self.shape)} {self.dtype}"
        return repr(self.value)


@dataclass(frozen=True)
class CallSpec:
    """A module's forward call as recorded: its arguments, or why it cannot be remade (``why``)."""

    args: tuple[ArgSpec, ...]
    why: str | None = None

    @property
    def key(self) -> tuple:
        return tuple((a.key, a.kind, a.shape, a.dtype, a.value if a.kind == "const" else None) for a in self.args)

    def label(self) -> str:
        return ", ".join((f"{a.key}=" if a.key else "") + a.label() for a in self.args if a.kind == "tensor")


def _spec_of(key: str | None, value) -> ArgSpec | str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if value.is_complex():  # (not floating point either: checked first)
            return "a complex tensor argument"
        low = high = None
        if not value.is_floating_point() and value.dtype != torch.bool and value.numel():
            low, high = int(value.min()), int(value.max())  # valid ids and positions for remade inputs
        return ArgSpec(key, "tensor", tuple(value.shape), dtype, low, high)
    if isinstance(value, _CONSTANTS):
        return ArgSpec(key, "const", value=value)
    return f"takes a {type(value).__name__}" + (f" ({key})" if key else "")


def record_call(args: tuple, kwargs: dict) -> CallSpec:
    specs = []
    for key, value in [(None, a) for a in args] + list(kwargs.items()):
        spec = _spec_of(key, value)
        if isinstance(spec, str):
            return CallSpec((), why=spec)
        specs.append(spec)
    if not any(s.kind == "tensor" for s in specs):
        return CallSpec(tuple(specs), why="takes no tensor")
    return CallSpec(tuple(specs))


@dataclass
class ModuleRecord:
    """A hooked module: its path in the model, the module, and its calls recorded per phase."""

    index: int
    path: str
    module: nn.Module
    depth: int
    parent: int | None
    calls: dict  # phase -> [CallSpec] (the first call of the phase)
    group: str = ""  # its group's name: the class, with #k when the class comes with other parameter shapes


class ModuleRanges:
    """Hooks that wrap every submodule's forward in a profiler range and record its calls (one phase at a
    time: ``phase(name)``); removed on exit."""

    def __init__(self, root: nn.Module | None) -> None:
        self.records: list[ModuleRecord] = []
        self.current = "decode"
        self._handles: list = []
        self._open: list = []
        if root is None:
            return
        by_id: dict[int, int] = {}
        for path, module in root.named_modules():
            if not path or isinstance(module, _CONTAINERS):
                continue
            parent_path = path.rsplit(".", 1)[0] if "." in path else ""
            parent = None
            while parent_path:
                parent_module = root.get_submodule(parent_path)
                if id(parent_module) in by_id:
                    parent = by_id[id(parent_module)]
                    break
                parent_path = parent_path.rsplit(".", 1)[0] if "." in parent_path else ""
            by_id[id(module)] = len(self.records)
            self.records.append(ModuleRecord(len(self.records), path, module, path.count("."), parent, {}))
        keys: dict[str, list] = defaultdict(list)  # class -> its distinct parameter signatures, in order
        for r in self.records:
            key = group_key(r.module)
            if key not in keys[key[0]]:
                keys[key[0]].append(key)
        for r in self.records:
            key = group_key(r.module)
            variants = keys[key[0]]
            r.group = key[0] if len(variants) == 1 else f"{key[0]}#{variants.index(key) + 1}"

    def phase(self, name: str) -> "ModuleRanges":
        self.current = name
        return self

    def __enter__(self) -> "ModuleRanges":
        for record in self.records:
            self._handles.append(record.module.register_forward_pre_hook(self._pre(record), with_kwargs=True))
            self._handles.append(record.module.register_forward_hook(self._post, always_call=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        while self._open:
            self._open.pop().__exit__(None, None, None)

    def _pre(self, record: ModuleRecord) -> Callable:
        def hook(module, args, kwargs):
            seen = record.calls.setdefault(self.current, [])
            if not seen:  # the first call of the phase: every step of a phase makes the same calls
                seen.append(record_call(args, kwargs))
            rf = torch.profiler.record_function(f"{MODULE_PREFIX}{record.index}")
            rf.__enter__()
            self._open.append(rf)

        return hook

    def _post(self, module, args, output):
        if self._open:
            self._open.pop().__exit__(None, None, None)


def root_module(model) -> nn.Module | None:
    """The model's own module tree: a transformers model inside an HFDecoder, a plain module inside a
    ModuleWorkload, a built-in decoder itself."""
    for attr in ("hf", "module"):
        inner = getattr(model, attr, None)
        if isinstance(inner, nn.Module):
            return inner
    return model if isinstance(model, nn.Module) else None


# -- time per module -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleTime:
    """A group of modules (one class, the same parameter shapes: the same block in every layer) in one
    phase, per step: its time, the part no task or extractor covers, and Amdahl's bounds on its share."""

    name: str  # the group: its class, qualified (transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock)
    paths: tuple[str, ...]  # its instances in the model
    calls: float
    time_us: float
    share: float
    uncovered_us: float  # time in ops no task or extractor covers
    uncovered_share: float
    uncovered_ops: tuple[str, ...]  # those ops, by name (views and other data-free ops left out)
    speedup_if_free: float
    speedup_if_2x: float
    inputs: tuple[str, ...]  # the recorded calls, as labels
    why_not: str | None  # why it cannot become a task (its forward takes a cache, ...); None: it can


def class_name(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def group_key(module: nn.Module) -> tuple:
    return (class_name(module), tuple((n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters()))


def module_times(step_events, ranges: ModuleRanges, phase: str, time_of: Callable, step_us: float,
                 covered: Callable, amdahl: Callable) -> list[ModuleTime]:
    """Per module group, its time and uncovered time per step (the least over the steps), largest first.
    ``covered(event)``: whether a profiler op event is one an op-family extractor rebuilds."""
    n = len(step_events)
    spent: dict[int, list] = defaultdict(lambda: [0.0] * n)
    open_time: dict[int, list] = defaultdict(lambda: [0.0] * n)
    open_ops: dict[int, set] = defaultdict(set)
    counts: dict[int, float] = defaultdict(float)
    for i, step in enumerate(step_events):
        for event in _module_events(step):
            index = int(event.name[len(MODULE_PREFIX):])
            spent[index][i] += time_of(event)
            open_time[index][i] += _uncovered(event, time_of, covered, open_ops[index])
            counts[index] += 1 / n
    groups: dict[str, list[int]] = defaultdict(list)
    for index in spent:
        groups[ranges.records[index].group].append(index)
    out = []
    for name, members in groups.items():
        time_us = min(sum(spent[m][i] for m in members) for i in range(n))
        uncovered = min(sum(open_time[m][i] for m in members) for i in range(n))
        calls = [c for m in members for c in ranges.records[m].calls.get(phase, [])]
        why = next((c.why for c in calls if c.why), None)
        labels = tuple(dict.fromkeys(c.label() for c in calls if not c.why))
        share = time_us / step_us if step_us > 0 else 0.0
        out.append(ModuleTime(name=name, paths=tuple(ranges.records[m].path for m in members),
                              calls=sum(counts[m] for m in members), time_us=time_us, share=share,
                              uncovered_us=uncovered, uncovered_share=uncovered / step_us if step_us > 0 else 0.0,
                              uncovered_ops=tuple(sorted(set().union(*(open_ops[m] for m in members)))),
                              speedup_if_free=amdahl(share), speedup_if_2x=amdahl(share, 2.0), inputs=labels,
                              why_not=why))
    out.sort(key=lambda m: -m.time_us)
    return out


def _module_events(event):
    for child in event.cpu_children:
        if child.name.startswith(MODULE_PREFIX):
            yield child
        if child.name.startswith("ratchet::") and not child.name.startswith("ratchet::op:"):
            yield from _module_events(child)


def _uncovered(event, time_of, covered, names: set) -> float:
    """Time under ``event`` in ops that no registry op range and no extractor covers, their names added
    to ``names`` (nested module ranges are looked through: a module's uncovered ops include its
    children's). A no-op ``aten::to`` (no copy under it) and the FREE_OPS move nothing and are left out."""
    total = 0.0
    for child in event.cpu_children:
        if child.name.startswith("ratchet::op:"):
            continue
        if child.name.startswith("ratchet::"):
            total += _uncovered(child, time_of, covered, names)
        elif child.name in FREE_OPS or (child.name == "aten::to" and not child.cpu_children) or covered(child):
            continue
        else:
            total += time_of(child)
            names.add(child.name)
    return total


def choose(modules_by_phase: dict, ranges: ModuleRanges, threshold: float) -> list[str]:
    """The module groups worth a task of their own, from the outside in: a group whose calls can be
    remade, that runs an op no task or extractor covers, and whose share reaches ``threshold`` in a
    phase, unless one of its instances lies inside a group already chosen."""
    reach: dict[str, float] = defaultdict(float)
    why: dict[str, str | None] = {}
    for modules in modules_by_phase.values():
        for m in modules:
            if m.uncovered_ops:
                reach[m.name] = max(reach[m.name], m.share)
            why[m.name] = why.get(m.name) or m.why_not
    depth: dict[str, int] = {}
    indices: dict[str, list[int]] = defaultdict(list)
    for r in ranges.records:
        name = r.group
        if name in reach:
            depth[name] = min(depth.get(name, math.inf), r.depth)
            indices[name].append(r.index)
    chosen, inside = [], set()
    for name in sorted(reach, key=lambda k: (depth.get(k, 0), -reach[k])):
        if why.get(name) or reach[name] < threshold:
            continue
        if any(_has_ancestor(ranges, i, inside) for i in indices[name]):
            continue
        chosen.append(name)
        inside.update(indices[name])
    return chosen


def not_remade(modules_by_phase: dict, ranges: ModuleRanges, threshold: float,
               chosen: list[str]) -> dict[str, tuple[str, dict[str, float]]]:
    """The module groups no task can be made of (a forward that takes a cache object, ...) whose own
    uncovered time reaches ``threshold`` in a phase: their uncovered time less that of the groups
    inside them already named (chosen ones, and such groups found deeper first), so a decoder layer
    around them is named only for what it runs itself. Group name -> (why, own uncovered share by phase)."""
    uncovered: dict[str, dict[str, float]] = defaultdict(dict)
    why: dict[str, str] = {}
    for phase, modules in modules_by_phase.items():
        for m in modules:
            uncovered[m.name][phase] = m.uncovered_share
            if m.why_not:
                why.setdefault(m.name, m.why_not)
    members: dict[str, list[int]] = defaultdict(list)
    for r in ranges.records:
        members[r.group].append(r.index)
    named = set(chosen)
    out = {}
    depth = {g: min(ranges.records[i].depth for i in idx) for g, idx in members.items()}
    # The model's own body (depth 0) is what its layers leave over: no task to speak of.
    for group in sorted((g for g in why if depth.get(g, 0) > 0), key=lambda g: -depth[g]):
        own = dict(uncovered[group])
        mine = set(members[group])
        for inner in named:
            inside = [i for i in members[inner] if _nearest_among(ranges, i, named | {group}) in mine]
            for phase in own:
                own[phase] -= len(inside) / len(members[inner]) * uncovered[inner].get(phase, 0.0)
        if max(own.values(), default=0.0) >= threshold:
            out[group] = (why[group], own)
            named.add(group)
    return out


def _nearest_among(ranges: ModuleRanges, index: int, groups: set) -> int | None:
    """The nearest ancestor of record ``index`` whose group is in ``groups``."""
    parent = ranges.records[index].parent
    while parent is not None and ranges.records[parent].group not in groups:
        parent = ranges.records[parent].parent
    return parent


def _has_ancestor(ranges: ModuleRanges, index: int, among: set) -> bool:
    parent = ranges.records[index].parent
    while parent is not None:
        if parent in among:
            return True
        parent = ranges.records[parent].parent
    return False


def layer_of(path: str) -> int | None:
    """The layer index in a module path (``model.layers.3.mlp`` -> 3)."""
    match = re.search(r"\.(\d+)(\.|$)", path)
    return int(match.group(1)) if match else None
