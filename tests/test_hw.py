"""`ratchet hw`: datasheet leads per GPU generation, name matching, and the CLI on a machine without a GPU."""

import json
import subprocess
import sys

import pytest
import torch

from ratchet import cli
from ratchet.hardware import detect as detect_mod
from ratchet.hardware.sheets import SHEETS, find_sheet

REQUIRED = ["A100", "L40S", "RTX 4090", "H100", "H200", "B200", "GB200", "RTX 5090", "RTX PRO 6000 Blackwell", "MI300X"]


def ratchet(*args):
    return subprocess.run([sys.executable, "-m", "ratchet", *args], capture_output=True, text=True, timeout=120)


def test_every_required_sheet_present():
    assert set(REQUIRED) <= set(SHEETS)
    for sheet in SHEETS.values():
        assert sheet.notes and sheet.warp_size in (32, 64)


@pytest.mark.parametrize("name", ["H100", "H200"])
def test_hopper(name):
    s = SHEETS[name]
    assert s.architecture == "Hopper" and s.compute_capability == "9.0"
    assert s.tensor_core_family == "wgmma" and s.tma and s.clusters and s.fp8 and not s.fp4


@pytest.mark.parametrize("name", ["B200", "GB200", "RTX 5090", "RTX PRO 6000 Blackwell"])
def test_blackwell_fp4(name):
    s = SHEETS[name]
    assert s.architecture.startswith("Blackwell") and s.fp4 and s.fp8 and s.tma


def test_blackwell_datacenter_vs_consumer():
    for name in ("B200", "GB200"):
        assert "tcgen05" in SHEETS[name].tensor_core_family and SHEETS[name].compute_capability == "10.0"
    for name in ("RTX 5090", "RTX PRO 6000 Blackwell"):
        assert "tcgen05" not in SHEETS[name].tensor_core_family and SHEETS[name].compute_capability == "12.0"


def test_ampere_ada_amd():
    a100 = SHEETS["A100"]
    assert a100.tensor_core_family == "mma.sync" and not a100.fp8 and not a100.fp4 and not a100.tma
    for name in ("L40S", "RTX 4090"):
        assert SHEETS[name].compute_capability == "8.9" and SHEETS[name].fp8 and not SHEETS[name].clusters
    mi = SHEETS["MI300X"]
    assert mi.vendor == "AMD" and mi.warp_size == 64 and mi.tensor_core_family == "MFMA"
    assert mi.compute_capability == "gfx942" and not mi.tma


@pytest.mark.parametrize("detected, key", [
    ("NVIDIA H200", "H200"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("nvidia h100 80gb hbm3", "H100"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
])
def test_find_sheet(detected, key):
    assert find_sheet(detected).name == key


def test_find_sheet_misses():
    assert find_sheet("NVIDIA RTX 6000 Ada Generation") is None
    assert find_sheet("Some Future GPU") is None and find_sheet(None) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_hw_json_no_gpu():
    proc = ratchet("hw", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["device"] is None and "no GPU" in out["note"]
    assert out["detected"]["cpu_cores"] >= 1 and out["detected"]["cpu"]


def test_cli_hw_device_name():
    proc = ratchet("hw", "--device-name", "H200", "--json")
    assert proc.returncode == 0, proc.stderr
    sheet = json.loads(proc.stdout)["sheet"]
    assert sheet["name"] == "H200" and sheet["memory_gb"] == pytest.approx(141, abs=1)
    assert sheet["memory_bandwidth_tbps"] == pytest.approx(4.8)


def test_cli_hw_unknown_device_name():
    proc = ratchet("hw", "--device-name", "Voodoo 5")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ratchet: error:") and "H200" in lines[0]


def test_cli_hw_unknown_detected_gpu(monkeypatch, capsys):
    fake = {"device": "NVIDIA Mystery 9000", "compute_capability": "11.0", "sms": 7, "ceilings": None}
    monkeypatch.setattr(detect_mod, "detect", lambda: fake)
    assert cli.main(["hw", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sheet"] is None and out["detected"]["sms"] == 7
    assert out["note"] == "no sheet for this device; the numbers above are what torch reports"
    assert cli.main(["hw"]) == 0  # the readable form prints too
    assert "no sheet for this device" in capsys.readouterr().out


def test_cached_ceilings_read_not_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    assert detect_mod.cached_ceilings("NVIDIA H200", "550.1") is None
    entry = {"device_name": "NVIDIA H200", "driver": "550.1", "copy_tbps": 4.1}
    (tmp_path / "ceilings.json").write_text(json.dumps({"NVIDIA H200 | 550.1": entry}))
    assert detect_mod.cached_ceilings("NVIDIA H200", "550.1") == entry
