"""``ratchet export CAMPAIGN|RUN -o DIR``: the gated kernels as an installable package.

``DIR/pyproject.toml`` and the package ``ratchet_export_<id>``:

- ``kernels/<op>.py``: each gated kernel as the standalone file ``ratchet best`` writes (its config
  baked in);
- ``ops.py``: each kernel a ``torch.library`` custom op ``ratchet_export_<id>::<op>`` (one opaque node
  for torch.compile and CUDA graphs), dispatched by shape: inside the ranges the judge passed (every
  dimension between the smallest and the largest size judged, a dtype judged), the kernel; outside them,
  the op's original math (the task's reference, which the adapter checked against the model's module);
- ``apply(model)``: routes a transformers model's matching modules (only the kinds of op exported)
  through those custom ops with Ratchet's adapter; ``restore()`` on what it returns undoes it;
- ``module_tasks/<op>/``: for a module task's kernel (a whole module of the model as one op, gated as
  its modules' forward), the task file and its config; ``apply`` routes the model's modules of that class
  through the kernel (``ratchet.e2e.models.module_route``), inside the judged ranges, and the module's
  own forward outside them. Such kernels run as judged: opaque to torch.compile, as the gate and the stack
  run them (no custom op, no ``kernels`` layer);
- ``layers.py``, ``hub.py``, ``layer_repository/``: the ops as Hugging Face ``kernels`` layers, a local
  layer repository ``kernels.kernelize`` loads with no network, ``kernel_mapping()`` pointing at it and
  ``mark_layers(model)`` for transformers versions whose decorators ignore the installed ``kernels``
  (``ratchet.e2e.export_hub``);
- ``manifest.json``: device, date, verdicts, per-shape speedups, shape ranges, gate results;
- ``test_installed.py``: re-checks every kernel against its reference on the machine it is installed on.

``apply`` and the test import Ratchet (the adapter, the registry, the tasks' references and inputs):
the package lists it as a dependency.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from string import Template

from ratchet.e2e.export_hub import REPOSITORY, write_hub
from ratchet.e2e.exported import PACKAGE_PREFIX
from ratchet.e2e.models.module_route import is_module_task, load_task_module
from ratchet.run.ledger import Ledger, LedgerError, write_standalone

# Which adapter kinds route each op, so apply() leaves the other modules as they are.
KINDS_OF = {"rmsnorm": ("norm",), "silu_mul": ("mlp", "experts"), "rope": ("rope",), "decode_attention": ("attention",),
            "moe_route": ("router",), "softmax": ("router",)}


class ExportError(Exception):
    """Nothing (or nothing valid) to export; one line, exit 2."""


def _gated_runs(ledger: Ledger, ident: str, gates_dir: Path) -> tuple[list[tuple[dict, dict]], dict]:
    """(run, gate) for each gated kernel of campaign or run ``ident``, and what describes the source."""
    from ratchet.run import campaigns as store

    if ident.startswith("c") and store.has_campaigns(ledger):
        try:
            campaign = store.get_campaign(ledger, ident)
        except LedgerError:
            campaign = None
        if campaign is not None:
            out = []
            for run_id, gate in campaign["state"].get("gates", {}).items():
                if gate.get("verdict") == "pass" and gate.get("file"):
                    out.append((ledger.get_run(run_id), json.loads(Path(gate["file"]).read_text())))
            if not out:
                raise ExportError(f"campaign {ident} has no kernel that passed its gate; nothing to export")
            return out, {"campaign": ident, "model": campaign["model"], "device": campaign["device"]}
    run = ledger.get_run(ident)
    gates = []
    for path in sorted(Path(gates_dir).glob(f"{ident}-*.json")):
        gate = json.loads(path.read_text())
        if gate.get("passed"):
            gates.append(gate)
    if not gates:
        raise ExportError(f"run {ident} has no passing gate (run 'ratchet gate {ident} --workload MODEL' first)")
    return [(run, gates[-1])], {"run": ident, "model": gates[-1]["workload"], "device": run["device"]}


def _copy_module_task(task_file: Path, folder: Path) -> Path:
    """The module task's file, and the config.json it builds the module from, copied into the package."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.py").write_text(task_file.read_text())
    config = task_file.parent / "config.json"
    if config.exists():
        (folder / "config.json").write_text(config.read_text())
    return folder / "task.py"


def shape_ranges(attempt: dict) -> dict:
    """The ranges the judge passed: per dimension [smallest, largest] over every shape judged, the dtypes."""
    dims: dict[str, list[int]] = {}
    dtypes = set()
    for s in attempt["shapes"]:
        if not s.get("correct", True):
            continue
        dtypes.add(s.get("dtype"))
        for k, v in s["shape"].items():
            lo, hi = dims.get(k, [v, v])
            dims[k] = [min(lo, v), max(hi, v)]
    return {"dims": dims, "dtypes": sorted(d for d in dtypes if d)}


def export(ledger: Ledger, ident: str, out_dir: str | Path, gates_dir: Path) -> Path:
    """Write the package of campaign or run ``ident``'s gated kernels under ``out_dir``; returns it."""
    from ratchet.e2e.workloads import OPS

    pairs, source = _gated_runs(ledger, ident, gates_dir)
    out = Path(out_dir)
    package = PACKAGE_PREFIX + re.sub(r"[^a-z0-9_]", "_", ident.lower())
    root = out / package
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    kernels, left_out = [], []
    for run, gate in pairs:
        op = run["task"]
        module_task = None
        if op not in OPS:
            if not is_module_task(run["task_path"]):
                # It passed its gate as one, so its task file has been moved or changed since.
                left_out.append({"op": op, "run": run["id"], "why": f"its task file {run['task_path']} is no longer "
                                 "a module task's (moved or changed since its gate)"})
                continue
            # The task file (and the config it builds the module from) travels with the package: apply()
            # routes the model's modules of its class through the kernel as the gate did.
            module_task = _copy_module_task(Path(run["task_path"]), root / "module_tasks" / op)
        best = ledger.best(run["id"])
        if (best["source_sha256"], best["config"]) != (gate["attempt"]["source_sha256"], gate["attempt"]["config"]):
            raise ExportError(f"run {run['id']}: its best changed since its gate; gate it again before exporting")
        write_standalone(best, root / "kernels" / f"{op}.py")
        kernels.append({"op": op, "run": run["id"], "attempt": best["seq"], "source_sha256": best["source_sha256"],
                        **({"module_task": module_task.relative_to(root).as_posix(),
                            "names": load_task_module(module_task)._SPEC["names"]} if module_task else {}),
                        "config": best["config"], "verdict": best["verdict"], "speedup": best["speedup"],
                        "ranges": shape_ranges(best),
                        "shapes": [{"shape": s["shape"], "dtype": s.get("dtype"), "held_out": s.get("held_out"),
                                    "speedup": s.get("speedup")} for s in best["shapes"]],
                        "gate": {"model": gate["workload"], "passed": gate["passed"], "device": gate["device"],
                                 "device_name": gate["device_name"],
                                 "settings": [{k: st[k] for k in ("kind", "batch", "length", "graphs", "verdict",
                                                                   "ratio", "logits_err", "logits_budget")}
                                              for st in gate["settings"]]}})
    manifest = {"package": package, **source, "device_name": run["device_name"],
                "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "kernels": kernels,
                "left_out": left_out}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (root / "__init__.py").write_text(_INIT.substitute(package=package))
    (root / "ops.py").write_text(_OPS.substitute(package=package))
    write_hub(root, package, [k["op"] for k in kernels if "module_task" not in k])
    (root / "test_installed.py").write_text(_TEST.substitute(package=package))
    (out / "pyproject.toml").write_text(_PYPROJECT.substitute(name=package.replace("_", "-"), package=package,
                                                                repository=REPOSITORY))
    return out


_PYPROJECT = Template('''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "$name"
version = "0.1.0"
description = "Kernels Ratchet judged and gated, as torch custom ops dispatched by shape: apply(model), and a Hugging Face kernels layer repository"
requires-python = ">=3.10"
dependencies = ["torch", "ratchet"]

[project.optional-dependencies]
kernels = ["kernels>=0.17"]

[tool.setuptools]
packages = ["$package", "$package.kernels"]

[tool.setuptools.package-data]
$package = ["manifest.json", "$repository/build/*/*", "module_tasks/*/*"]
''')

_INIT = Template('''"""Kernels Ratchet judged and gated (see manifest.json): ``apply(model)`` routes a transformers model's
matching modules through them; ``OPS`` maps each op to its custom op (kernel inside the judged shape
ranges, the original math outside); ``kernel_mapping()`` (and ``mark_layers(model)``) plug them into
Hugging Face ``kernels``' ``kernelize``."""

from $package.hub import kernel_mapping, mark_layers  # noqa: F401
from $package.ops import MANIFEST, OPS, apply, in_range  # noqa: F401
''')

_OPS = Template('''"""Each gated kernel as a torch custom op, dispatched by shape (written by ratchet export)."""

import importlib.util
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
MANIFEST = json.loads((HERE / "manifest.json").read_text())
LIBRARY = "$package"
_lib = torch.library.Library(LIBRARY, "FRAGMENT")


def _kernel(op):
    name = f"{LIBRARY}.kernels.{op}"
    spec = importlib.util.spec_from_file_location(name, HERE / "kernels" / f"{op}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.kernel


def in_range(entry, args):
    """Whether a call lies inside the shape ranges and dtypes the judge passed for this kernel."""
    from ratchet.e2e.workloads.registry import SHAPES

    if "module_task" in entry:  # a module's kernel: the task's named dims lead its first input
        shape = dict(zip(entry["names"], args[0].shape))
    else:
        shape = SHAPES[entry["op"]](*args)
    ranges = entry["ranges"]
    if str(args[0].dtype).removeprefix("torch.") not in ranges["dtypes"]:
        return False
    return all(k in ranges["dims"] and ranges["dims"][k][0] <= v <= ranges["dims"][k][1] for k, v in shape.items())


def _define(entry):
    from ratchet.e2e.workloads.registry import SCHEMAS, reference

    op = entry["op"]
    kernel, original = _kernel(op), reference(op)
    schema = SCHEMAS[op]
    returns_tuple = schema.rstrip().endswith(")")
    counts = {"kernel": 0, "original": 0}

    def run(*args):
        inside = in_range(entry, args)
        counts["kernel" if inside else "original"] += 1
        out = (kernel if inside else original)(*args)
        return tuple(out) if returns_tuple else out

    def fake(*args):
        out = original(*args)
        return tuple(out) if returns_tuple else out

    _lib.define(op + schema)
    _lib.impl(op, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{LIBRARY}::{op}", fake, lib=_lib)
    fn = getattr(getattr(torch.ops, LIBRARY), op)
    fn.counts = counts
    return fn


OPS = {entry["op"]: _define(entry) for entry in MANIFEST["kernels"] if "module_task" not in entry}
# Module tasks' kernels: each replaces whole modules of the model (apply() routes them); as judged, so
# opaque to torch.compile as the gate ran them (compiled, Inductor would trace into the file and build its
# Triton kernels again on its own argument types; a CUDA graph captured around the step replays them as
# usual). Their calls since apply(), by what ran: MODULE_COUNTS[op] (as OPS[op].counts for the custom ops).
MODULES = {entry["op"]: torch.compiler.disable(_kernel(entry["op"]))
           for entry in MANIFEST["kernels"] if "module_task" in entry}
MODULE_COUNTS = {op: {"kernel": 0, "original": 0} for op in MODULES}


def _module_dispatch(entry, kernel, own):
    counts = MODULE_COUNTS[entry["op"]]

    def run(*args):
        inside = in_range(entry, args)
        counts["kernel" if inside else "original"] += 1
        return (kernel if inside else own)(*args)

    return run


def apply(model):
    """Route ``model``'s modules of the exported ops' kinds through the custom ops (Ratchet's adapter
    checks each module's math first), and its modules of each module task's class through that task's
    kernel (each instance probed against the task first); returns the adaptation, whose ``restore()``
    undoes all of it."""
    from ratchet.e2e.export import KINDS_OF
    from ratchet.e2e.models.adapter import adapt
    from ratchet.e2e.models.module_route import route_module
    from ratchet.e2e.workloads.registry import OpRegistry

    registry = OpRegistry()
    for op, fn in OPS.items():
        registry.set(op, fn)
    kinds = sorted({k for op in OPS for k in KINDS_OF.get(op, ())})
    adaptation = adapt(model, registry, kinds)
    for entry in MANIFEST["kernels"]:
        if "module_task" in entry:
            op = entry["op"]
            route = route_module(model, registry, op, HERE / entry["module_task"])
            registry.set(op, _module_dispatch(entry, MODULES[op], registry.reference_of(op)))
            adaptation.swapped[op] = len(route.routed)
            adaptation._undo.append(route.restore)
    return adaptation
''')

_TEST = Template('''"""Re-check every kernel of this package against its reference on this machine (written by ratchet
export): run with ``python -m pytest --pyargs $package.test_installed``."""

import pytest
import torch

from $package.ops import HERE, MANIFEST, MODULES, OPS, in_range

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("entry", MANIFEST["kernels"], ids=lambda e: e["op"])
def test_kernel_matches_its_reference(entry):
    from ratchet.task import load_task

    task = load_task(str(HERE / entry["module_task"]) if "module_task" in entry else entry["op"])
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    checked = 0
    for judged in entry["shapes"]:
        dtype = getattr(torch, judged["dtype"])
        args = task.make_inputs(judged["shape"], dtype, DEVICE, generator)
        args = args if isinstance(args, tuple) else (args,)
        assert in_range(entry, args)
        got = (OPS.get(entry["op"]) or MODULES[entry["op"]])(*args)
        wide = tuple(a.to(task.reference_dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
        want = task.reference(*wide)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        if entry["op"] == "moe_route":  # the experts' order in a row is free: compare sorted by id
            (gw, gi), (ww, wi) = got, want
            gi, go = gi.sort(dim=-1)
            wi, wo = wi.sort(dim=-1)
            got, want = (gw.gather(1, go), gi), (ww.gather(1, wo), wi)
        from ratchet.task import DEFAULT_TOLERANCES

        tol = task.tolerances.get(dtype) or DEFAULT_TOLERANCES[dtype]
        for g, w in zip(got, want):
            if g.is_floating_point():
                torch.testing.assert_close(g.to(w.dtype), w, atol=tol.atol, rtol=tol.rtol)
            else:
                assert torch.equal(g, w)
        checked += 1
    assert checked == len(entry["shapes"])
''')
