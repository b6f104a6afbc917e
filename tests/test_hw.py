"""`ratchet hw`: datasheet leads per GPU generation, name matching, and the CLI on a machine without a GPU."""

import dataclasses
import json
import subprocess
import sys
import time

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


def _entry(name="NVIDIA H200", driver="550.1", host="gpu-host / Xeon x64", age_s=0.0, copy_tbps=4.1, threads=None):
    from ratchet.hardware.ceilings import Ceilings

    now = time.time() - age_s
    c = Ceilings(name, driver, copy_tbps, 700.0, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "test",
                 torch_version=torch.__version__, threads=threads, host=host, measured_unix=now)
    return c.key, dataclasses.asdict(c)


def test_cached_ceilings_read_not_measured(tmp_path, monkeypatch):
    """The newest usable entry of the device, never a measurement; old, malformed and other devices' ignored."""
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    assert detect_mod.cached_ceilings("NVIDIA H200", "550.1") is None
    newer, older, stale = _entry(age_s=10), _entry(host="other", age_s=100, copy_tbps=3.9), _entry(age_s=30 * 86400)
    legacy = ("NVIDIA H200 | 550.1", {"device_name": "NVIDIA H200", "driver": "550.1", "copy_tbps": 9.9})
    (tmp_path / "ceilings.json").write_text(json.dumps(dict([older, newer, legacy, _entry(name="NVIDIA B200")])))
    assert detect_mod.cached_ceilings("NVIDIA H200", "550.1") == newer[1]
    assert detect_mod.cached_ceilings("NVIDIA H200", None) == newer[1]
    assert detect_mod.cached_ceilings("NVIDIA H200", "560.0") is None
    (tmp_path / "ceilings.json").write_text(json.dumps(dict([stale, legacy])))
    assert detect_mod.cached_ceilings("NVIDIA H200", "550.1") is None  # too old, or keyed the old way


def test_cli_hw_lists_cached_ceilings_with_date_and_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    good, stale = _entry(), _entry(driver="535.0", age_s=30 * 86400)
    (tmp_path / "ceilings.json").write_text(json.dumps(dict([good, stale])))
    assert cli.main(["hw", "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["cached_ceilings"]}
    assert rows[good[0]]["usable"] and rows[good[0]]["measured_at"] == good[1]["measured_at"]
    assert not rows[stale[0]]["usable"] and "days ago" in rows[stale[0]]["problem"]
    assert cli.main(["hw"]) == 0
    text = capsys.readouterr().out
    assert good[0] in text and good[1]["measured_at"] in text and "used by the judge" in text
    assert "not used: measured 30.0 days ago" in text


def test_cli_hw_remeasure_renews_the_cpu_entry(tmp_path, monkeypatch, capsys):
    from ratchet.hardware import ceilings as ceil

    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path))
    monkeypatch.setattr(ceil, "_MEMO", {})
    key = ceil.current_key("cpu")
    (tmp_path / "ceilings.json").write_text(json.dumps({key: {**_entry()[1], "copy_tbps": 1e-6}}))
    assert cli.main(["hw", "--remeasure", "--json"]) == 0
    (measured,) = [m for m in json.loads(capsys.readouterr().out)["remeasured"] if m["device"] == "cpu"]
    assert measured["key"] == key and measured["threads"] == ceil.JUDGE_CPU_THREADS and measured["copy_tbps"] > 1e-4
    stored = json.loads((tmp_path / "ceilings.json").read_text())
    if measured["cached"]:
        assert stored[key]["copy_tbps"] == measured["copy_tbps"]
    else:  # a busy machine: not cached, and the line says why
        assert measured["busy"]
    assert cli.main(["hw", "--remeasure"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cpu: ")]
    assert len(line) == 1 and "TB/s" in line[0] and ("cached" in line[0])


@pytest.mark.parametrize("args, says", [
    (["hw", "--remeasure", "--device-name", "H200"], "--remeasure measures this machine"),
    (["hw", "--remeasure", "--audit"], "does not take --remeasure"),
])
def test_cli_hw_remeasure_refusals(args, says):
    proc = ratchet(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0]
