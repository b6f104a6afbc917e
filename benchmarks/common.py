"""What every benchmark shares: smaller versions of a task, the command that reproduces a run, and the one
results file.

Smaller tasks for benchmarks that must fit a device call: the public shapes of the device's shape set that
match given sizes (``where``), the first N of them and/or the first dtype only. Held-out shapes are kept
(the judge draws them).

Results: every benchmark appends its figures to one JSON-lines file (``record_results``), one object a
row with ``benchmark``, ``date``, ``device``, ``command`` and the row's figures, units in the field names
(``median_us``, ``speedup``, ``share``), so one plot or one pandas ``read_json(lines=True)`` reads them all.
The file is ``out/benchmarks.jsonl`` under the current folder, or ``$RATCHET_BENCH_RESULTS``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from ratchet.task import Task


def refused(probe: str, why) -> int:
    """A probe's answer to arguments it cannot use or a machine it cannot run on: one line on stderr, and
    exit status 2 for its ``main`` to return."""
    print(f"{probe}: {why}", file=sys.stderr)
    return 2


def subset_task(task: Task, device: str, shapes: int | None = None, first_dtype: bool = False,
                where: dict[str, int] | None = None) -> Task:
    changes = {}
    if shapes or where:
        field = "cpu" if device == "cpu" else "gpu"
        shape_set = task.shape_set(device)
        public = [s for s in shape_set.public if all(s.get(k) == v for k, v in (where or {}).items())]
        if not public:
            raise ValueError(f"{task.name}: no public {field} shape has {where}")
        changes[field] = dataclasses.replace(shape_set, public=public[:shapes] if shapes else public)
    if first_dtype:
        changes["dtypes"] = task.dtypes[:1]
    return dataclasses.replace(task, **changes) if changes else task


def describe_subset(shapes: int | None, first_dtype: bool, where: dict[str, int] | None = None) -> str:
    parts = ([f"public shapes with {', '.join(f'{k}={v}' for k, v in where.items())}"] if where else [])
    parts += ([f"first {shapes} public shapes"] if shapes else []) + (["first dtype only"] if first_dtype else [])
    return ", ".join(parts)


def parse_where(items: list[str] | None) -> dict[str, int]:
    """``["Hkv=1", "B=32"]`` -> ``{"Hkv": 1, "B": 32}`` (argparse type errors say which item is wrong)."""
    where = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.lstrip("-").isdigit():
            raise ValueError(f"--where wants SIZE=INTEGER, got {item!r}")
        where[key] = int(value)
    return where


REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_ENV = "RATCHET_BENCH_RESULTS"
DEFAULT_RESULTS = Path("out") / "benchmarks.jsonl"


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The shell command that reruns a benchmark: ``python -m benchmarks.suite --tasks rmsnorm``."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def module_env() -> dict[str, str]:
    """The environment for a child ``python -m benchmarks.X``: the repository root first on PYTHONPATH, so
    the child finds the package from any working folder (relative paths keep meaning the same)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *([path] if path else [])])}


def results_path() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or DEFAULT_RESULTS)


def device_label(device: str) -> str:
    """The device by name (``NVIDIA H200``), or ``cpu``: a figure is worth nothing without it."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    return "cpu" if device == "cpu" else device


def record_results(benchmark: str, rows: list[dict], *, device: str, command: str) -> Path:
    """Append one JSON object per row to the results file (its folder made) and return the file's path.
    Each row gets ``benchmark``, ``date`` (UTC), ``device`` and ``command``; its own fields carry their
    units in their names. Values that JSON cannot hold are written as strings rather than lost."""
    path = results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = {"benchmark": benchmark, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "device": device_label(device), "command": command}
    with path.open("a") as fh:
        for row in rows:
            fh.write(json.dumps({**stamp, **row}, default=str) + "\n")
    return path


def read_results(path: Path | None = None) -> list[dict]:
    """Every row of the results file (none when it does not exist yet)."""
    path = path or results_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SHAPE_FIELDS = ("median_us", "iqr_us", "ref_median_us", "speedup", "achieved_tbps", "roofline_fraction", "mode",
                "graph_median_us")


def verdict_rows(verdict: dict, **labels) -> list[dict]:
    """One results row per judged shape of a verdict's JSON (``Verdict.to_json()``), with ``labels`` (task,
    candidate, ...) in front: the figures the judge measured, in its own units."""
    rows = []
    for shape in verdict.get("shapes") or []:
        rows.append({**labels, "verdict": verdict.get("verdict"), "shape": shape.get("shape"),
                     "dtype": shape.get("dtype"), **{k: shape.get(k) for k in SHAPE_FIELDS if k in shape}})
    return rows
