"""Module tasks from ``ratchet profile --extract`` (``ratchet.e2e.extract_module``) on a tiny random Gemma.

Gemma's MLP is ``down(gelu_tanh(gate(x)) * up(x))``: the adapter leaves it alone (its activation is not
SiLU), so its GELU and product are ops no task or extractor covers and the MLP is a module with no task.
Checked: the profile lists it with its share and Amdahl bounds; the task file written for it loads,
its reference equals the model's own module on an input captured from the model, and the MLP's math
written apart on its own inputs; its seed passes `ratchet eval` on the CPU, and a kernel without the
activation fails with wrong_output.
"""

import ast
import io
import json
import sys

import pytest
import torch
import torch.nn.functional as F

from ratchet.candidate import load_candidate
from ratchet.cli import main
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task

pytest.importorskip("transformers")

from ratchet.e2e.profile import amdahl  # noqa: E402

MLP = "transformers.models.gemma.modeling_gemma.GemmaMLP"


@pytest.fixture(scope="module")
def gemma(gemma_module_tasks):
    _folder, prof, written, skipped, root = gemma_module_tasks
    return prof, written, skipped, root


def test_the_gelu_mlp_is_a_module_with_no_task(gemma):
    prof, _written, _skipped, _root = gemma
    entry = next(m for m in prof.modules_no_task if m.name == MLP)
    assert entry.paths == ("model.layers.0.mlp", "model.layers.1.mlp")
    for phase in ("decode", "prefill"):
        timed = next(m for m in prof.phase(phase).modules if m.name == MLP)
        assert {"aten::gelu", "aten::mul"} <= set(timed.uncovered_ops)
        assert entry.shares[phase] == timed.share and timed.share >= 0.01
        assert entry.speedup_if_free[phase] == pytest.approx(amdahl(timed.share))
        assert entry.speedup_if_2x[phase] == pytest.approx(amdahl(timed.share, 2.0))
    assert entry.inputs == {"decode": ["[2, 1, 64] float32"], "prefill": ["[1, 8, 64] float32"]}
    # Its Linear layers are each covered by the linear extractor; a routed norm by its task.
    covered = {m.name for p in prof.phases for m in p.modules if not m.uncovered_ops}
    assert any(name.startswith("torch.nn.modules.linear.Linear") for name in covered)
    from ratchet.cli.profile import print_profile
    from rich.console import Console

    out = io.StringIO()
    print_profile(prof, Console(file=out, width=200))
    assert "Modules with no task" in out.getvalue() and MLP in out.getvalue()
    assert json.dumps(prof.to_json())  # the module entries are plain data


def test_the_task_file_stands_alone_with_the_profiled_shapes(gemma):
    _prof, written, skipped, root = gemma
    # Which modules reach 1% of a step depends on the machine's timing (the scaled embedding does at times);
    # one that cannot be rebuilt exactly is reported with why, never written. The MLP always is written.
    assert all(s.why for s in skipped) and MLP not in {s.name for s in skipped}, skipped
    (e,) = [w for w in written if w.name.endswith("_GemmaMLP")]
    task = load_task(e.path)
    assert [dict(s) for s in task.gpu.public] == e.shapes
    assert {"B": 2, "S": 1} in e.shapes and {"B": 1, "S": 8} in e.shapes
    assert task.dtypes == (torch.float32,) and task.reference_dtype == torch.float64
    assert (root / "tasks" / e.name / "config.json").exists()
    text = open(e.path).read()
    assert "import ratchet" not in text.replace("from ratchet.task import", "")
    # The implementations the model's modules dispatched to travel with the task (config.json leaves them
    # out): Ratchet's own attention as the one it wraps, so the file runs where the adapter never did.
    spec = ast.literal_eval(text.split("_SPEC = ", 1)[1].split("\n}\n", 1)[0] + "\n}")
    assert spec["implementations"] == {"_experts_implementation": "eager", "_attn_implementation": "sdpa"}
    assert "with experts implementation 'eager', attn implementation 'sdpa'." in " ".join(
        ast.get_docstring(ast.parse(text)).split())
    rebuilt = sys.modules[task.reference.__module__]._module("cpu")  # the module the reference calls
    assert rebuilt.config._attn_implementation == "sdpa" and rebuilt.config._experts_implementation == "eager"
    # The math a kernel must compute is in the file: the class's own forward, as transformers wrote it.
    doc = ast.get_docstring(ast.parse(text))
    assert "# transformers.models.gemma.modeling_gemma.GemmaMLP\n    def forward(self, x)" in doc, doc
    assert "self.act_fn(self.gate_proj(x)) * self.up_proj(x)" in doc
    # The cost: x, the three weights and the output in fp32; 2 FLOPs per multiply-add of the three GEMMs.
    c = task.cost({"B": 2, "S": 1}, torch.float32)
    tokens, h, i = 2, 64, 128
    assert c.bytes == 4 * (tokens * h + 3 * h * i + tokens * h)
    assert c.flops == 2 * tokens * 3 * h * i


def test_the_reference_is_the_models_own_module_on_the_captured_input(gemma):
    prof, written, _skipped, _root = gemma
    (e,) = [w for w in written if w.name.endswith("_GemmaMLP")]
    task = load_task(e.path)
    mlp = prof.model.hf.model.layers[1].mlp
    seen = {}
    hook = mlp.register_forward_hook(lambda m, args, out: seen.update(x=args[0].clone(), out=out.clone()))
    try:
        cache = prof.model.new_cache(1, 8)
        prof.model.prefill(torch.arange(5)[None] % 256, cache)
    finally:
        hook.remove()
    weights = [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]
    torch.testing.assert_close(task.reference(seen["x"], *weights), seen["out"], rtol=0, atol=0)
    # On the task's own inputs, the math written apart: down(gelu_tanh(gate(x)) * up(x)).
    x, gate, up, down = task.make_inputs({"B": 1, "S": 3}, torch.float32, "cpu", torch.Generator().manual_seed(4))
    apart = F.linear(F.gelu(F.linear(x, gate), approximate="tanh") * F.linear(x, up), down)
    torch.testing.assert_close(task.reference(x, gate, up, down), apart)


def _judge(task, source, tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return evaluate(task, load_candidate(str(path)), None, JudgeOptions(device="cpu", time_it=False))


def test_eval_passes_the_seed_and_fails_a_kernel_without_the_activation(gemma, tmp_path, capsys):
    _prof, written, _skipped, _root = gemma
    (e,) = [w for w in written if w.name.endswith("_GemmaMLP")]
    rc = main(["eval", e.path, e.seed, "--device", "cpu", "--no-timing", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert rc == 0 and verdict["verdict"] == "pass", verdict["reasons"]
    task = load_task(e.path)
    header = "import torch.nn.functional as F\n\n\ndef kernel(x, gate, up, down):\n"
    no_activation = header + "    return F.linear(F.linear(x, gate) * F.linear(x, up), down)\n"
    verdict = _judge(task, no_activation, tmp_path, "no_activation")
    assert verdict.verdict == "fail" and "wrong_output" in [r.code for r in verdict.reasons], verdict.reasons
