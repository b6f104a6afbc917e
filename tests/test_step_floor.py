"""benchmarks/step_floor.py: the byte floor of a decode step, counted from the workloads themselves."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_floor import expected_experts, step_floor  # noqa: E402

from ratchet.e2e.workloads import build  # noqa: E402


def _bytes(t):
    return t.numel() * t.element_size()


@pytest.mark.parametrize("name", ["llama", "deepseek"])
def test_the_floor_counts_the_real_models_weights_and_cache(name):
    batch, context = 3, 40
    floor = step_floor(name, batch, context, size="tiny")
    model = build(name, "tiny", device="cpu")  # real tensors: the meta patch is undone
    assert model.embed.device.type == "cpu"
    params = dict(model.named_parameters())
    experts = sum(_bytes(p) for n, p in params.items() if n.endswith(("w_gate_up", "w_down")) and p.dim() == 3)
    touched = expected_experts(model.config.n_experts, model.config.topk, batch) / model.config.n_experts \
        if name == "deepseek" else 0.0
    whole = sum(_bytes(p) for p in params.values()) - _bytes(model.embed) - experts
    expected = whole + batch * model.config.hidden * model.embed.element_size() + experts * touched
    assert floor.weight_bytes == pytest.approx(expected, rel=1e-12)
    assert floor.expert_bytes == pytest.approx(experts * touched, rel=1e-12)
    assert (experts > 0) == (name == "deepseek")
    cache = model.new_cache(batch, context)  # its length is rounded up: a step reads `context` positions of it
    assert floor.cache_bytes == sum(_bytes(t) for t in cache.tensors()) * context / cache.max_len
    assert floor.floor_us(1.0) == pytest.approx((floor.weight_bytes + floor.cache_bytes) / 1e6)


def test_expected_experts_under_uniform_routing():
    assert expected_experts(256, 8, 1) == pytest.approx(8.0)
    assert expected_experts(256, 8, 32) == pytest.approx(256 * (1 - (248 / 256) ** 32))
    assert 255.9 < expected_experts(256, 8, 10_000) <= 256


def test_the_script_writes_a_table_and_refuses_a_missing_file(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "step_floor.py"), "--size", "tiny", "--copy-tbps", "1",
           "--contexts", "64", "--batch", "2", "--out", str(tmp_path / "floor.md")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in (tmp_path / "floor.md").read_text().splitlines() if line.startswith("| llama")
            or line.startswith("| deepseek")]
    assert len(rows) == 2
    bad = subprocess.run(cmd + ["--e2e", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such file" in bad.stderr
    for wrong, says in ((["--workloads", "mistral"], "invalid choice: 'mistral'"),
                        (["--contexts", "0"], "--contexts and --batch must be positive")):
        proc = subprocess.run(cmd + wrong, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and says in proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr
