"""benchmarks/e2e_models.py stays robust: a row that cannot finish is one line on stderr and one row of
the table, and the files are written with what was measured."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_row_that_times_out_is_one_line_and_the_table_is_kept(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e_models.py"), "--tiny", "--device", "cpu",
                           "--models", "llama", "--batches", "1", "--contexts", "64", "--row-timeout", "0.5",
                           "--first-row-timeout", "0.5", "--out", str(out)], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == ["e2e_models: llama B=1 L=64: timed out after 0 s"]
    rows = json.loads((out / "e2e_models.json").read_text())["rows"]
    assert rows == [{"model": "llama", "batch": 1, "context": 64, "error": "timed out after 0 s"}]
    table = (out / "e2e_models.md").read_text()
    assert "| llama | - | 1 | 64 | - | - | - | - | - | timed out after 0 s |" in table


def test_each_models_first_row_gets_twice_the_limit_by_default(tmp_path):
    """The first row compiles with Inductor's cache cold; the rows after it reuse what it compiled."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e_models.py"), "--tiny", "--device", "cpu",
                           "--models", "llama", "--batches", "1", "2", "--contexts", "64", "--row-timeout", "0.3",
                           "--out", str(out)], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == ["e2e_models: llama B=1 L=64: timed out after 1 s",
                                                 "e2e_models: llama B=2 L=64: timed out after 0 s"]


def test_the_logits_of_each_fast_way_are_compared_with_transformers():
    sys.path.insert(0, str(ROOT))
    import math

    import torch

    from benchmarks.e2e_models import _logits_note, _table, logits_diff

    ref = torch.tensor([[1.0, 2.0, -3.0]])
    assert logits_diff(ref + torch.tensor([[0.0, 0.25, -0.5]]), ref) == 0.5
    assert logits_diff(torch.tensor([[1.0, float("inf"), -3.0]]), ref) == math.inf  # overflowed: never close
    assert logits_diff(torch.tensor([[1.0, float("nan"), -3.0]]), torch.tensor([[1.0, float("nan"), -2.0]])) == 1.0
    row = {"model": "llama", "layers": 2, "full_layers": 32, "batch": 1, "context": 64, "transformers_us": 100.0,
           "compiled_us": 50.0, "ratchet_us": 25.0, "compiled_logits_diff": 0.0625, "ratchet_logits_diff": 0.125}
    assert _logits_note(row) == "logits vs transformers: compiled 0.0625, ratchet 0.125"
    assert _table([row]).splitlines()[-1] == ("| llama | 2/32 | 1 | 64 | 10000.0 | 20000.0 | 40000.0 | 2.00x | - | "
                                              "logits vs transformers: compiled 0.0625, ratchet 0.125 |")
    assert _logits_note({"ratchet_error": "no --export package given"}) == ""


def test_the_floor_counts_the_experts_the_routers_picked():
    """One token reaches exactly top_k experts a layer; a batch reaches at most min(E, B x top_k). The
    floor reads those, so at batch 32 it is not the 128 experts the tokens could reach."""
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.e2e_models import _read_weight_bytes, experts_touched
    from ratchet.e2e.models import families

    cfg = families.config("qwen3_moe", "tiny", n_layers=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    k, experts = cfg.num_experts_per_tok, cfg.num_experts
    with torch.no_grad():
        one = experts_touched(model, lambda: model(torch.tensor([[3]])), k)
        batch = experts_touched(model, lambda: model(torch.arange(16).reshape(16, 1)), k)
    assert one == k
    assert k < batch <= min(experts, 16 * k)
    dense = _read_weight_bytes(cfg, 16, 0)
    per_expert = 2 * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    assert _read_weight_bytes(cfg, 16, batch) == int(dense + batch * per_expert)
    assert _read_weight_bytes(cfg, 16) == int(dense + min(experts, 16 * k) * per_expert)  # nothing counted
    assert experts_touched(torch.nn.Linear(2, 2), lambda: None, k) is None  # no router: no count
