"""An exported package through Hugging Face ``kernels``' ``kernelize`` (CPU): a recorded, gated rmsnorm
kernel is exported, installed into a fresh virtual environment, and a tiny random Llama is kernelized
with the package's mapping to its local layer repository. Its norms then run the package's custom op
(counted), the logits equal the unpatched model's within rmsnorm's fp32 tolerance, rows beyond the
judged range run the original op, and ``Mode.TRAINING`` keeps the model's own forward (the ops have no
derivative)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("kernels", reason="Hugging Face kernels is not installed (pip install 'kernels>=0.17')")

from ratchet.e2e.export import export  # noqa: E402
from ratchet.run.ledger import Ledger  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")

# Correct but not the reference's formulation: the mean of squares through vector_norm.
RMSNORM = '''
import torch


def kernel(x, weight, eps):
    ms = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True).pow(2) / x.shape[-1]
    return (x.float() * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)
'''
JUDGED_ROWS = (1, 8, 32)  # the judged range of T is [1, 32]; the tiny Llama's width is H = 64


def _gated_rmsnorm(tmp: Path) -> tuple[Path, str, Path]:
    """A ledger whose rmsnorm run's best passed a gate on the tiny llama, as the loop and the gate record."""
    ledger_path, gates = tmp / "ledger.sqlite", tmp / "gates"
    shapes = [{"shape": {"T": t, "H": 64}, "dtype": "float32", "correct": True, "held_out": t == 8,
               "speedup": 1.2} for t in JUDGED_ROWS]
    with Ledger(ledger_path) as ledger:
        run = ledger.create_run(task="rmsnorm", task_path="rmsnorm", device="cpu", device_name="test cpu",
                                proposer="tune")
        verdict = {"verdict": "pass", "reasons": [], "speedup": 1.2, "shapes": shapes, "judge_wall_s": 1.0}
        ledger.record_attempt(run, "kernel.py", RMSNORM, {}, verdict, "tune", keep=True)
        best = ledger.best(run)
    gates.mkdir()
    setting = {"kind": "decode", "batch": 1, "length": 64, "graphs": "simulated", "verdict": "pass", "ratio": 0.9,
               "logits_err": 1e-6, "logits_budget": 1e-4}
    gate = {"passed": True, "workload": "llama", "device": "cpu", "device_name": "test cpu", "settings": [setting],
            "attempt": {"source_sha256": best["source_sha256"], "config": best["config"]}}
    (gates / f"{run}-llama-tiny-cpu.json").write_text(json.dumps(gate))
    return ledger_path, run, gates


CHECK = '''
import copy, json, sys, torch
import kernels
from kernels import KernelizeFallback, Mode, kernelize, use_kernel_mapping
from transformers import LlamaForCausalLM
import {name} as pkg
from ratchet.e2e.models import families

torch.manual_seed(0)
model = LlamaForCausalLM(families.config("llama")).eval()
plain, training = copy.deepcopy(model), copy.deepcopy(model)
small = torch.randint(0, 256, (1, 4))  # 4 rows: inside the judged range of T
big = torch.randint(0, 256, (1, {rows} + 8))  # more rows than any judged shape: the original op
with torch.no_grad():
    want_small, want_big = plain(input_ids=small).logits, plain(input_ids=big).logits



class Centered(torch.nn.Module):  # RMSNorm's attributes, another norm's math: must not be marked
    def __init__(self):
        super().__init__()
        self.weight, self.variance_epsilon = torch.nn.Parameter(torch.ones(64)), 1e-6

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


unmarked = pkg.mark_layers(torch.nn.Sequential(Centered()))
norm_class = type(model.model.norm)
premarked = getattr(norm_class, "kernel_layer_name", None)  # transformers' own mark, where kernels lets it
marked = pkg.mark_layers(model)
with use_kernel_mapping(pkg.kernel_mapping(), inherit_mapping=False):
    # Fall back only for layers the mapping does not name (transformers marks more than the norms: its
    # rotary embedding too, from kernels 0.19 and transformers 5.25); a mapped layer that cannot load fails.
    kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=KernelizeFallback.NO_LAYER)
    kernelize(training, mode=Mode.TRAINING, device="cpu")
norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
counts = pkg.OPS["rmsnorm"].counts
start = dict(counts)

def used():
    return {{k: counts[k] - start[k] for k in counts}}

with torch.no_grad():
    got_small = model(input_ids=small).logits
    used_small = used()
    got_big = model(input_ids=big).logits
    used_all = used()
    got_training = training(input_ids=small).logits
print(json.dumps({{
    "marked": marked, "unmarked": unmarked, "norms": len(norms), "premarked": premarked,
    "layer_name": getattr(norm_class, "kernel_layer_name", None),
    "kernelized": sum(m.forward.__func__ is pkg.layers.RMSNorm.forward for m in norms),
    "training_kept": sum(m.forward.__func__ is type(m).forward
                         for m in training.modules() if type(m).__name__ == "LlamaRMSNorm"),
    "loaded": [[k.metadata.name.python_name, str(k.module.layers.__file__)] for k in kernels.get_loaded_kernels()],
    "used_small": used_small, "used_all": used_all, "used_training": {{k: used()[k] - used_all[k] for k in counts}},
    "err_small": (got_small - want_small).abs().max().item(), "err_big": (got_big - want_big).abs().max().item(),
    "err_training": (got_training - want_small).abs().max().item(),
    "scale": want_small.abs().max().item()}}))
'''


def test_kernelize_runs_the_exported_op_inside_the_judged_range_and_falls_back_outside(tmp_path):
    ledger, run, gates = _gated_rmsnorm(tmp_path)
    with Ledger(ledger) as led:
        pkg = export(led, run, tmp_path / "pkg", gates)
    name = f"ratchet_export_{run}"
    variant = pkg / name / "layer_repository" / "build" / "torch-cpu"
    assert json.loads((variant / "metadata.json").read_text())["name"] == name.replace("_", "-")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    venv = tmp_path / "venv"
    # --without-pip: the system's pip and setuptools serve the venv; torch, transformers, kernels are not reinstalled.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(pkg)], check=True,
                   env=env, capture_output=True)
    check = tmp_path / "check.py"
    check.write_text(textwrap.dedent(CHECK.format(name=name, rows=JUDGED_ROWS[-1])))
    # From tmp_path, not pkg: the package imported is the one installed in the venv.
    out = subprocess.run([python, str(check)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # transformers marks its norms itself only with some kernels versions (0.18.2 up to 0.19 for 5.24; 0.19.1
    # too for 5.25); mark_layers marks them where it did not, and leaves its mark where it did.
    assert result["layer_name"] == "RMSNorm" and result["unmarked"] == {}
    assert result["marked"] == ({} if result["premarked"] == "RMSNorm" else {"LlamaRMSNorm": "RMSNorm"})
    assert result["norms"] == 5 and result["kernelized"] == 5  # 2 layers x 2 norms + the final norm
    # kernels loaded the layer repository, whose layers are the package installed in the venv.
    assert [n for n, _ in result["loaded"]] == [name] and result["loaded"][0][1].startswith(str(venv))
    assert result["used_small"] == {"kernel": 5, "original": 0}  # inside the judged ranges
    assert result["used_all"] == {"kernel": 5, "original": 5}  # outside them: the original op
    assert result["training_kept"] == 5 and result["used_training"] == {"kernel": 0, "original": 0}
    tol = 1e-5 * max(result["scale"], 1.0)  # rmsnorm's fp32 tolerance (atol = rtol = 1e-5) at the logits' scale
    assert result["err_small"] <= tol and result["err_big"] <= tol and result["err_training"] == 0.0
