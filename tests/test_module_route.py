"""A module task's kernel put into the model it came from (``ratchet.e2e.models.module_route``), gated and
stacked, on a tiny random Gemma on the CPU.

Gemma's MLP (``down(gelu_tanh(gate(x)) * up(x))``) is a module with no task: ``extract_module`` writes
its task. Checked: the route finds both MLPs, leaves the model's logits exactly as they were with the
op's default (the module's own forward), and changes them with a kernel of other math; a call the task
never saw runs the module's own forward; a module whose weights do not fit is left alone, with why;
``restore()`` puts every forward back. Then the gate passes the MLP's math written apart and fails a
kernel without the activation on the logits, and the stack applies the passing one.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
import torch.nn.functional as F

from ratchet.cli import main
from ratchet.run.ledger import Ledger

pytest.importorskip("transformers")

from ratchet.e2e.models import load_model  # noqa: E402
from ratchet.e2e.models.module_route import ModuleRouteError, is_module_task, route_module  # noqa: E402
from ratchet.e2e.workloads.registry import OpRegistry  # noqa: E402

OP = "gemma_mlp"
APART = '''
import torch.nn.functional as F


def kernel(x, gate, up, down):
    # The GELU MLP written apart from the module: tanh-GELU of the gate times up, then down.
    return F.linear(F.gelu(F.linear(x, gate), approximate="tanh") * F.linear(x, up), down)
'''
NO_ACTIVATION = '''
import torch.nn.functional as F


def kernel(x, gate, up, down):
    return F.linear(F.linear(x, gate) * F.linear(x, up), down)
'''


@pytest.fixture(scope="module")
def gemma(gemma_module_tasks):
    folder, _prof, written, _skipped, root = gemma_module_tasks
    (mlp,) = [w for w in written if w.name.endswith("_GemmaMLP")]
    return folder, mlp, root


def _model(folder):
    registry = OpRegistry()
    return load_model(str(folder), size="tiny", device="cpu", seed=0, registry=registry), registry


def _prefill(model):
    return model.prefill(torch.arange(6)[None] % 256, model.new_cache(1, 16)).float()


def test_is_module_task_knows_the_module_tasks_from_the_others(gemma, tmp_path):
    _folder, mlp, _root = gemma
    assert is_module_task(mlp.path)
    assert not is_module_task("rmsnorm") and not is_module_task(tmp_path / "none.py") and not is_module_task(None)
    plain = tmp_path / "plain_task.py"
    plain.write_text("TASK = None\n")
    assert not is_module_task(plain)


def test_the_route_keeps_the_logits_with_the_default_and_takes_the_kernel_when_set(gemma):
    folder, mlp, _root = gemma
    model, registry = _model(folder)
    before = _prefill(model)
    route = route_module(model.hf, registry, OP, mlp.path)
    assert route.routed == ["model.layers.0.mlp", "model.layers.1.mlp"] and route.kept == []
    assert route.module_class == "transformers.models.gemma.modeling_gemma.GemmaMLP"
    with registry.record() as calls:
        same = _prefill(model)
    assert torch.equal(same, before)  # the default is the module's own forward: nothing changes
    assert sum(c.task == OP for c in calls) >= 2 and OP in registry.ops
    namespace = {}
    exec(APART, namespace)
    registry.set(OP, namespace["kernel"])
    torch.testing.assert_close(_prefill(model), before, rtol=1e-4, atol=1e-4)
    exec(NO_ACTIVATION, namespace)
    registry.set(OP, namespace["kernel"])
    assert float((_prefill(model) - before).abs().max()) > 1e-3
    route.restore()
    with registry.record() as calls:
        back = _prefill(model)
    assert torch.equal(back, before) and not any(c.task == OP for c in calls)


def test_a_call_the_task_never_saw_runs_the_modules_own_forward(gemma):
    folder, mlp, _root = gemma
    model, registry = _model(folder)
    module = model.hf.model.layers[0].mlp
    x = torch.randn(3, 64)  # two dims where the task has three (B, S, hidden)
    want = module(x)
    route_module(model.hf, registry, OP, mlp.path)
    registry.set(OP, lambda *args: pytest.fail("the kernel ran on a call the task never saw"))
    with registry.record() as calls:
        got = module(x)
    assert torch.equal(got, want) and calls == []


def test_modules_whose_weights_do_not_fit_are_left_alone_with_why(gemma):
    folder, mlp, _root = gemma
    model, _registry = _model(folder)
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    config = model.hf.config
    config.intermediate_size = 96
    holder = torch.nn.ModuleDict({"wide": GemmaMLP(config)})
    with pytest.raises(ModuleRouteError) as refused:
        route_module(holder, OpRegistry(), OP, mlp.path)
    assert "its gate_proj.weight is [96, 64], the task's [128, 64]" in str(refused.value)
    with pytest.raises(ModuleRouteError, match="the model has no instance of it"):
        route_module(torch.nn.Linear(2, 2), OpRegistry(), OP, mlp.path)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


# The shapes the judge passed (the task's CPU set: B up to 2, S up to 8): what the export's ranges are.
JUDGED = [{"shape": {"B": 2, "S": 1}, "dtype": "float32", "correct": True, "held_out": False, "speedup": 1.5},
          {"shape": {"B": 1, "S": 8}, "dtype": "float32", "correct": True, "held_out": False, "speedup": 1.5}]


def _record(ledger: Ledger, task_path: str, source: str) -> str:
    run = ledger.create_run(task=OP, task_path=task_path, device="cpu", device_name="test cpu", proposer="tune")
    verdict = {"verdict": "pass", "reasons": [], "speedup": 1.5, "shapes": JUDGED, "judge_wall_s": 1.0}
    ledger.set_best(run, ledger.record_attempt(run, "kernel.py", source, {}, verdict, "tune"))
    return run


def test_the_gate_and_the_stack_take_a_module_tasks_kernel(gemma, tmp_path):
    folder, mlp, _root = gemma
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        good, wrong = _record(ledger, mlp.path, APART), _record(ledger, mlp.path, NO_ACTIVATION)
    where = ("--workload", str(folder), "--json", "--ledger", str(path))
    code, out = _cli("gate", good, *where)  # the default grid: what the stack asks of a gate
    passed = json.loads(out)
    assert code == 0 and passed["passed"], passed
    assert len(passed["settings"]) == 7 and {s["verdict"] for s in passed["settings"]} == {"pass"}
    assert any("module op: the kernel runs 2 transformers.models.gemma.modeling_gemma.GemmaMLP" in n
               for n in passed["notes"])
    # The judged B is 1 to 2 and S 1 to 8: decode at batch 1 lies inside (both MLPs of a step), batch 4
    # and the 256-token prefill outside, and the notes say so for each of those settings.
    judged = {(s["kind"], s["batch"], s["length"]): s["calls_judged"] for s in passed["settings"]}
    assert judged[("decode", 1, 64)] == [2, 2] and judged[("decode", 4, 64)] == [0, 2]
    assert judged[("prefill", 1, 256)] == [0, 2]
    assert any(n.startswith("decode B=4 L=64: 0 of 2 calls of gemma_mlp in a step lie inside the shapes the judge "
                            "passed") for n in passed["notes"])
    assert not any(n.startswith("decode B=1 L=64:") for n in passed["notes"])
    code, out = _cli("gate", wrong, *where, "--contexts", "64", "--batches", "1", "--prefill", "none")
    failed = json.loads(out)
    assert code == 1 and not failed["passed"] and failed["settings"][0]["reason"] == "logits", failed["settings"][0]
    assert not any(n.startswith("replaces the earlier gate") for n in failed["notes"])
    code, out = _cli("gate", wrong, *where, "--contexts", "64", "--batches", "1", "--prefill", "none")
    again = json.loads(out)  # the same run on the same model: its outcome is replaced, and the gate says so
    assert any(n.startswith("replaces the earlier gate of this run on this model (fail, ") and "batches [1]" in n
               for n in again["notes"]), again["notes"]
    code, out = _cli("stack", str(folder), good, "--size", "tiny", "--device", "cpu", "--batch", "1", "--context",
                     "64", "--no-compile", "--json", "--ledger", str(path))
    stacked = json.loads(out)
    assert code == 0, stacked
    assert [layer["kind"] for layer in stacked["layers"]] == ["baseline", "kernel"]
    assert stacked["layers"][1]["op"] == OP and stacked["layers"][1]["max_logit_diff"] < 1e-3
    assert any(f"{OP}: the kernel runs 2" in n for n in stacked["notes"])

    # Exported: the task file travels with the package; apply() routes the MLPs through the kernel inside
    # the judged ranges and leaves them their own forward outside; the installed test re-checks it.
    out = tmp_path / "pkg"
    code, _ = _cli("export", good, "-o", str(out), "--ledger", str(path))
    assert code == 0
    name = f"ratchet_export_{good.lower()}"
    manifest = json.loads((out / name / "manifest.json").read_text())
    (entry,) = manifest["kernels"]
    assert entry["op"] == OP and entry["module_task"] == f"module_tasks/{OP}/task.py" and entry["names"] == ["B", "S"]
    assert entry["ranges"] == {"dims": {"B": [1, 2], "S": [1, 8]}, "dtypes": ["float32"]}
    assert (out / name / "module_tasks" / OP / "config.json").exists() and manifest["left_out"] == []
    check = tmp_path / "check.py"
    check.write_text(f"""
import json, sys, torch
sys.path.insert(0, {str(out)!r})
import {name} as pkg
from ratchet.e2e.models import load_model
from ratchet.e2e.workloads.registry import OpRegistry

hf = load_model({str(folder)!r}, size="tiny", device="cpu", seed=0, registry=OpRegistry(), adapt=False).hf
small, big = torch.arange(6)[None] % 256, torch.arange(20)[None] % 256  # S=6 judged; S=20 beyond every S judged
with torch.no_grad():
    want_small, want_big = hf(input_ids=small).logits, hf(input_ids=big).logits
adaptation = pkg.apply(hf)
counts = pkg.ops.MODULE_COUNTS[{OP!r}]
start = dict(counts)  # apply's probes ran the modules too
with torch.no_grad():
    got_small = hf(input_ids=small).logits
    small_counts = {{k: counts[k] - start[k] for k in counts}}
    got_big = hf(input_ids=big).logits
adaptation.restore()
# As the gate ran it: opaque to torch.compile (a break around the kernel, not a trace into its file)
x = torch.randn(1, 6, hf.config.hidden_size)
mlp = hf.model.layers[0].mlp
weights = [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]
explained = torch._dynamo.explain(lambda x: pkg.ops.MODULES[{OP!r}](x.sin(), *weights).cos())(x)
print(json.dumps({{"swapped": adaptation.swapped[{OP!r}], "small": small_counts, "breaks": explained.graph_break_count,
                  "all": {{k: counts[k] - start[k] for k in counts}},
                  "err_small": (got_small - want_small).abs().max().item(), "err_big": (got_big - want_big).abs().max().item()}}))
""")
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, str(check)], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["swapped"] == 2 and result["small"] == {"kernel": 2, "original": 0}
    assert result["all"] == {"kernel": 2, "original": 2}  # S=20: beyond the judged S, the module's own
    assert result["err_small"] < 1e-4 and result["err_big"] == 0.0
    assert result["breaks"] == 1
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           f"{name}.test_installed"], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(out)}, cwd=tmp_path)
    assert test.returncode == 0 and "1 passed" in test.stdout, test.stdout[-2000:] + test.stderr[-2000:]


def test_a_run_on_no_op_and_no_module_task_is_refused_in_one_line(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        run = ledger.create_run(task="gelu", task_path="gelu", device="cpu", device_name="test cpu", proposer="tune")
        verdict = {"verdict": "pass", "reasons": [], "speedup": 1.5, "shapes": [], "judge_wall_s": 1.0}
        ledger.set_best(run, ledger.record_attempt(run, "k.py", "def kernel(x):\n    return x\n", {}, verdict, "tune"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["gate", run, "--workload", "llama", "--ledger", str(path)])
    assert code == 2 and "which is no workload op" in err.getvalue() and "no module task" in err.getvalue()


def test_a_narrowed_module_task_routes_the_models_full_width_modules(narrowed_moe_block):
    """A wide module's CPU set is the module narrowed (W); the route probes the model's own modules at the
    model's widths (on an H100, 2026-12-07, the narrowed inputs drove no block and the gate routed none)."""
    from ratchet.task import load_task

    folder, block = narrowed_moe_block(prefill=0)

    assert all(s.get("W") == 128 for s in load_task(block.path).cpu.public)
    registry = OpRegistry()
    model = load_model(str(folder), size="tiny", device="cpu", seed=0, registry=registry)
    route = route_module(model.hf, registry, "moe_block", block.path)
    assert route.routed == ["model.layers.0.mlp"], route.kept
