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


def test_program_and_brief_show_a_module_tasks_parameters_math_and_settings(gemma, tmp_path, capsys,
                                                                            monkeypatch):
    # The reference of a module task is `_run(*arguments)`: program.md and the brief name the kernel's own
    # parameters and quote the file's docstring (the module's forward and its settings) instead.
    _prof, written, _skipped, _root = gemma
    (e,) = [w for w in written if w.name.endswith("_GemmaMLP")]
    monkeypatch.chdir(tmp_path)
    ledger = str(tmp_path / "l.sqlite")
    assert main(["program", e.path, "--device", "cuda", "--device-name", "H200", "--ledger", ledger]) == 0
    text = (tmp_path / "program.md").read_text()
    signature = "kernel(x0, gate_proj_weight, up_proj_weight, down_proj_weight)"
    assert f"Define `{signature}` with exactly" in text
    assert "self.act_fn(self.gate_proj(x)) * self.up_proj(x)" in text
    assert "Its settings (self and its children, as the model built them):" in text
    assert "gate_proj: in_features=64, out_features=128" in text
    capsys.readouterr()
    assert main(["context", e.path, "--device", "cpu"]) == 0
    brief = capsys.readouterr().out
    assert f"- Signature: `{signature}`" in brief and "self.act_fn(self.gate_proj(x))" in brief


def test_the_weight_floor_of_a_stack_of_experts_counts_the_experts_one_token_reaches():
    # A token's top-k experts are distinct, so any call reads at least k experts' weights (Qwen3-MoE: 8 of
    # 128); counting one expert made the floor, and every roofline share, 8x too low there.
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    from ratchet.e2e.extract_module import _experts_per_token, _param_floor, _weights

    config = Qwen3MoeConfig(hidden_size=32, moe_intermediate_size=16, num_experts=6, num_experts_per_tok=4)
    block = Qwen3MoeSparseMoeBlock(config)
    assert _experts_per_token(block) == 4
    one_expert = 4 * (2 * 16 * 32 + 32 * 16)  # gate_up [2I, H] and down [H, I] of one expert, fp32
    router = 4 * 6 * 32
    assert _param_floor(_weights(block), "float32", 4) == 4 * one_expert + router
    assert _param_floor(_weights(block), "float32", 9) == 6 * one_expert + router  # never beyond the stack
    # A dense module has no router: every parameter is read, and its top-k is 1.
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False))
    assert _experts_per_token(mlp) == 1 and _param_floor(_weights(mlp), "float32") == 4 * 8 * 4


def test_a_wide_modules_cpu_set_is_the_module_narrowed(narrowed_moe_block, tmp_path):
    # A module past NARROW_ABOVE_BYTES (Qwen3-30B-A3B's MoE block: 2.4 GB of fp32 experts, a judged CPU call
    # that took 20 s) gets a CPU set of the same class built at narrow widths; its GPU shapes keep the
    # model's. The threshold is lowered here so a small model crosses it.
    _folder, e = narrowed_moe_block(prefill=8, batches=(1, 4))
    task = load_task(e.path)
    # Profiled at decode batch 2 and an 8-token prefill; the batches the model will be gated at (1 and 4)
    # are public decode shapes too, and the held-out range reaches the largest.
    assert sorted((s["B"], s["S"]) for s in task.gpu.public) == [(1, 1), (1, 8), (2, 1), (4, 1)]
    assert task.gpu.held_out.dims["B"] == (1, 4)
    # Its router's top-k chooses on values: judged against the block at its own dtype, not float64, since a
    # higher-precision router picks other experts on near ties (the GPU's bf16 seed failed its fp32 one).
    assert task.reference_dtype == torch.float32 and task.dtypes == (torch.float32,)
    assert "It chooses on its values (sort, topk), so the judge runs it at the model's own float32" in " ".join(
        open(e.path).read().split())
    assert all("W" not in s for s in task.gpu.public) and all(s["W"] == 128 for s in task.cpu.public)
    assert all(s["W"] == 128 for s in task.cpu.held_out.draw(__import__("random").Random(0)))
    # The model's widths at a GPU shape; hidden 128, 16 experts (2 x top-2 rounded up to 16), expert width
    # 64 / 2 at a CPU shape.
    g = torch.Generator().manual_seed(3)
    full = task.make_inputs({"B": 1, "S": 1}, torch.float32, "cpu", g)
    assert [list(t.shape) for t in full] == [[1, 1, 256], [32, 128, 256], [32, 256, 64], [32, 256]]
    x, gate_up, down, router = task.make_inputs({"B": 2, "S": 3, "W": 128}, torch.float32, "cpu", g)
    assert [list(t.shape) for t in (x, gate_up, down, router)] == [[2, 3, 128], [16, 64, 128], [16, 128, 32],
                                                                   [16, 128]]
    # The reference at narrow widths is the block's math written apart: softmax router, top 2 renormalised,
    # each chosen expert's silu(gate) * up through down, weighted.
    flat = x.reshape(-1, 128)
    probs = torch.softmax(flat @ router.T, dim=-1)
    top, ids = probs.topk(2, dim=-1)
    top = top / top.sum(-1, keepdim=True)
    want = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for k in range(2):
            g_, u = (gate_up[ids[t, k]] @ flat[t]).chunk(2)
            want[t] += top[t, k] * (down[ids[t, k]] @ (F.silu(g_) * u))
    torch.testing.assert_close(task.reference(x, gate_up, down, router), want.reshape(2, 3, 128))
    # The cost at a narrow shape counts the narrow weights one token reaches (top-2 experts and the router).
    moved = task.cost({"B": 1, "S": 1, "W": 128}, torch.float32).bytes
    assert moved == 4 * (2 * (64 * 128 + 128 * 32) + 16 * 128) + 4 * 128 * 2  # weights, then x and the output
    # The seed (the module itself) passes the CPU's correctness phase at the narrow widths.
    verdict = evaluate(task, load_candidate(e.seed), None, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons
    assert {r.shape["W"] for r in verdict.shapes} == {128}
    # The narrowed block's outputs are small (weights drawn at the model's spread over fewer inputs): a
    # kernel returning zeros was within an absolute atol of them; the atol is a fraction of their RMS.
    zeros = tmp_path / "zeros.py"
    zeros.write_text("import torch\n\n\ndef kernel(x0, *weights):\n    return torch.zeros_like(x0)\n")
    verdict = evaluate(task, load_candidate(zeros), None, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "fail" and [r.code for r in verdict.reasons] == ["wrong_output"]
    assert "of the output RMS" in verdict.reasons[0].detail


def test_a_module_that_chooses_on_values_is_found_by_its_own_ops():
    from types import SimpleNamespace

    from ratchet.e2e.extract_module import chooses_on_values

    assert chooses_on_values(SimpleNamespace(uncovered_ops={"decode": ("aten::mul", "aten::topk")}))
    assert chooses_on_values(SimpleNamespace(uncovered_ops={"decode": (), "prefill": ("sort",)}))
    assert not chooses_on_values(SimpleNamespace(uncovered_ops={"decode": ("aten::gelu", "aten::mul")}))


def test_a_model_built_on_torchs_own_layer_norm_extracts_it(tmp_path, capsys):
    """StableLM normalises with torch.nn.LayerNorm, whose constructor takes a tuple (normalized_shape) that
    the model's config has no field for: the task is built from the instance's own values, and its seed
    (the module itself) passes the judge. It was a traceback out of `ratchet profile --extract` and
    `ratchet optimize`."""
    from transformers import StableLmConfig

    StableLmConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=512).save_pretrained(tmp_path / "stablelm")
    code = main(["profile", str(tmp_path / "stablelm"), "--device", "cpu", "--extract", str(tmp_path / "tasks")])
    _, err = capsys.readouterr()
    assert code == 0, err
    (folder,) = [p for p in (tmp_path / "tasks").iterdir() if p.name.endswith("_LayerNorm")]
    task_file = (folder / "task.py").read_text()
    assert "'normalized_shape': (64,)" in task_file and "torch.nn.modules.normalization" in task_file
    task = load_task(str(folder / "task.py"))
    verdict = evaluate(task, load_candidate(str(folder / "seeds" / "torch_reference.py")), None,
                       JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons
