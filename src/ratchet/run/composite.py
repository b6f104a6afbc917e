"""Per-shape winners: a generated candidate that sends each shape range to the attempt that won it.

When passing attempts of a run win on different shapes (an attempt beats the best at some shape beyond
the best's noise floor, with the keep rule's significance test, while the best or another attempt wins
elsewhere), the loop builds a composite: one standalone candidate file that embeds each winner's source
with its config baked in and, at every call, picks a winner by the task's shape parameters read from the
arguments (the nearest public shape judged, in log-size distance, at the call's dtype; so held-out and
unseen sizes go to the winner of the closest public shape). It is judged as any candidate (held-out
shapes included), kept by the same rule, and recorded with proposer ``composite``, its first parent as
``parent_attempt`` and every parent in the attempt's extra (``composite``).

The parents' sources run as modules of their own; their text is registered with ``linecache`` so that
Triton's JIT, which reads a kernel's source through ``inspect``, finds it without a file on disk.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ratchet.candidate import Candidate, load_candidate
from ratchet.run.keep import KeepPolicy, _significant, noise_floor, normalized_times, shape_key
from ratchet.run.ledger import Ledger
from ratchet.task import Task

PROPOSER = "composite"
EXTRA_KEY = "composite"  # in the attempt's extra: {"parents": [attempt ids], "routes": [...]}


@dataclass(frozen=True)
class Route:
    shape: dict[str, int]
    dtype: str
    attempt: dict  # the ledger row of the attempt that won this shape


def winners(attempts: list[dict], best: dict | None, policy: KeepPolicy = KeepPolicy()) -> list[Route] | None:
    """Per public shape of the best, the attempt that wins it: the fastest (normalized median) attempt
    that beats the best there beyond the best's noise floor, significantly; else the best. None unless
    at least two attempts win shapes."""
    if best is None:
        return None
    rivals = [a for a in attempts if _usable(a) and a["id"] != best["id"]]
    routes = []
    for row in best["shapes"]:
        if row.get("held_out") or not row.get("times_us") or not row.get("ref_times_us"):
            continue
        y = normalized_times(row)
        winner, fastest = best, float(np.median(y))
        for attempt in rivals:
            other = next((r for r in attempt["shapes"] if r.get("times_us") and r.get("ref_times_us")
                          and shape_key(r) == shape_key(row)), None)
            if other is None:
                continue
            x = normalized_times(other)
            median = float(np.median(x))
            if median < fastest and median < np.median(y) * (1 - noise_floor(y, policy)) \
                    and _significant(y, x, policy.alpha, "greater"):
                winner, fastest = attempt, median
        routes.append(Route(dict(row["shape"]), row["dtype"], winner))
    if len({r.attempt["id"] for r in routes}) < 2:
        return None
    return routes


def _usable(attempt: dict) -> bool:
    """A parent: passed, timed in full (not raced), a kernel(...) file, not itself a composite."""
    return (attempt["verdict"] == "pass" and not attempt.get("extra", {}).get("raced")
            and attempt["proposer"] != PROPOSER and "def kernel" in attempt["source"])


def key_readers(task: Task) -> tuple[dict[str, tuple[int, int, int]], int | None]:
    """How each shape key is read from the kernel's arguments: (argument index, dimension, multiple),
    found by making the task's CPU inputs (small) at its CPU shapes and some held-out draws, and keeping
    the (argument, dimension) whose size is the key's value (or a fixed multiple of it) in every one;
    and which argument's dtype is the call's (the first floating-point tensor)."""
    shape_set = task.cpu
    shapes = [dict(s) for s in shape_set.public]
    if shape_set.held_out is not None:
        rng = random.Random(0)
        for _ in range(3):
            shapes += shape_set.held_out.draw(rng)
    made, dtype_index = [], None
    for shape in shapes:
        inputs = task.make_inputs(shape, task.dtypes[0], "cpu", torch.Generator().manual_seed(0))
        made.append((shape, [tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in inputs]))
        dtype_index = next((i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()),
                           None)
    readers = {}
    for key in shapes[0]:
        for index, first in enumerate(made[0][1]):
            dims = range(len(first)) if isinstance(first, tuple) else ()
            found = next(((index, dim, m) for m in range(1, 9) for dim in dims
                          if all(_dim(args, index, dim) == m * shape[key] for shape, args in made)), None)
            if found:
                readers[key] = found
                break
    return readers, dtype_index


def _dim(args: list, index: int, dim: int):
    value = args[index] if index < len(args) else None
    return value[dim] if isinstance(value, tuple) and dim < len(value) else None


def composite_source(run_id: str, routes: list[Route], readers: Mapping[str, tuple[int, int, int]],
                     dtype_index: int | None) -> str:
    parents = list({r.attempt["id"]: r.attempt for r in routes}.values())
    index = {a["id"]: i for i, a in enumerate(parents)}
    parts = "\n".join(f"    ({a['seq']}, {dict(a['config'])!r}, {a['source']!r})," for a in parents)
    table = "\n".join(f"    ({r.dtype!r}, {dict(r.shape)!r}, {index[r.attempt['id']]}),  # attempt {r.attempt['seq']}"
                      for r in routes)
    seqs = ", ".join(str(a["seq"]) for a in parents)
    # A call's dispatch key, written out: a microsecond kernel must not pay for a loop here.
    reads = [f"args[{i}].shape[{d}]" for i, d, _ in readers.values()]
    key_expr = "(" + ", ".join(reads + [f"args[{dtype_index}].dtype" if dtype_index is not None else "None"]) + ")"
    return f'''"""Ratchet composite of run {run_id}: each shape range runs the attempt that won it (attempts {seqs}).

Generated by Ratchet; standalone: the attempts' sources are embedded with their configs baked in. A call
goes to the winner of the nearest public shape judged (log-size distance over the shape parameters, at
the call's dtype).
"""

import linecache
import math
import sys
import types

import torch

# (attempt seq, config, source) of each winner
_PARTS = [
{parts}
]
# shape parameter -> (argument index, dimension, multiple): where its value is read from the arguments
_READERS = {dict(readers)!r}
# (dtype, public shape, part) for each public shape judged
_ROUTES = [
{table}
]


def _load(index, seq, config, source):
    name = f"_ratchet_composite_part_{{index}}"
    filename = f"<ratchet composite part {{index}}: attempt {{seq}}>"
    # Triton's JIT reads kernel sources through inspect, which finds them here
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    kernel = module.kernel
    if not config:
        return kernel
    return lambda *args, **kwargs: kernel(*args, **{{**config, **kwargs}})


_KERNELS = [_load(i, *part) for i, part in enumerate(_PARTS)]


def _route(args):
    dtype = next((str(a.dtype).removeprefix("torch.") for a in args
                  if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
    sizes = {{}}
    for key, (index, dim, multiple) in _READERS.items():
        if index < len(args) and isinstance(args[index], torch.Tensor) and dim < args[index].dim():
            sizes[key] = max(1, args[index].shape[dim] // multiple)
    routes = [r for r in _ROUTES if r[0] == dtype] or _ROUTES

    def distance(route):
        return sum(abs(math.log(sizes[k]) - math.log(max(1, v))) for k, v in route[1].items() if k in sizes)

    return min(routes, key=distance)[2]


_CHOSEN = {{}}  # the part chosen for each (sizes, dtype) seen: the choice, not a result


def kernel(*args, **kwargs):
    key = {key_expr}
    part = _CHOSEN.get(key)
    if part is None:
        part = _CHOSEN[key] = _KERNELS[_route(args)]
    return part(*args, **kwargs)
'''


@dataclass(frozen=True)
class CompositeProposal:
    candidate: Candidate
    parents: tuple[int, ...]  # attempt ids
    routes: tuple[dict, ...]  # {"shape", "dtype", "attempt_seq"}


def propose(ledger: Ledger, run_id: str, task: Task, directory: Path) -> CompositeProposal | None:
    """A composite of the run's per-shape winners not judged yet, written under ``directory``; or None."""
    routes = winners(ledger.attempts(run_id, verdict="pass"), ledger.best(run_id))  # only passes can win a shape
    if routes is None:
        return None
    readers, dtype_index = key_readers(task)
    varying = {k for k in routes[0].shape if len({r.shape[k] for r in routes}) > 1}
    if not varying or not varying <= set(readers):  # the winners' shapes cannot be told apart at a call
        return None
    source = composite_source(run_id, routes, readers, dtype_index)
    sha = hashlib.sha256(source.encode()).hexdigest()
    if ledger.has_attempt(run_id, sha, {}):
        return None
    path = Path(directory) / f"composite_{sha[:12]}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    parents = tuple(dict.fromkeys(r.attempt["id"] for r in routes))
    return CompositeProposal(load_candidate(path), parents,
                             tuple({"shape": r.shape, "dtype": r.dtype, "attempt_seq": r.attempt["seq"]} for r in routes))


def describe(routes: tuple[dict, ...]) -> str:
    by_seq: dict[int, list[str]] = {}
    for r in routes:
        by_seq.setdefault(r["attempt_seq"], []).append(",".join(f"{k}={v}" for k, v in r["shape"].items()))
    return "composite: " + "; ".join(f"attempt {seq} at {' '.join(sorted(set(s)))}" for seq, s in by_seq.items())


def directory_for(ledger: Ledger, run_id: str) -> Path:
    return ledger.path.parent / "composites" / run_id


def attempt_extra(proposal: CompositeProposal) -> dict[str, Any]:
    return {"parents": list(proposal.parents), "routes": list(proposal.routes)}

