"""`ratchet hw --audit`: readings through a fake NVML and a fake /sys + /proc tree, each finding rule firing
exactly when it should, the JSON shape, and the real (GPU-less) machine answering with notes."""

import copy
import json
import re
import subprocess
import sys
import types

import pytest

from ratchet import cli
from ratchet.hardware import audit as audit_mod
from ratchet.hardware.audit import Finding, audit, findings, format_cpulist, parse_cpulist, report


class NVMLError(Exception):
    pass


# A GPU with nothing to change: persistence on, power limit at its max, ECC and MIG off, full PCIe link.
GOOD_GPU = {
    "name": b"NVIDIA H200", "bus_id": b"00000000:1B:00.0",
    "clocks": {1: 1980, 2: 3201}, "max_clocks": {1: 1980, 2: 3201}, "app_clocks": {1: 1980, 2: 3201},
    "default_app_clocks": {1: 1980, 2: 3201},
    "reasons": 0x1,  # gpu idle: not a finding
    "power": 120_000, "limit": 700_000, "enforced": 700_000, "default_limit": 700_000, "constraints": (200_000, 700_000),
    "persistence": 1, "ecc": (0, 0), "mig": (0, 0), "compute_mode": 0, "temperature": 41,
    "pcie": (5, 5, 16, 16),  # current gen, max gen, current width, max width
    "affinity": [0b1100],  # CPUs 2,3 (node 1)
    "numa_id": 1,
}


class FakeNVML(types.ModuleType):
    """The pynvml functions audit() calls, answering from per-GPU dicts; records every attribute asked for."""

    def __init__(self, gpus, init_error=None, unsupported=()):
        super().__init__("pynvml")
        self.gpus, self.init_error, self.unsupported = gpus, init_error, set(unsupported)
        self.asked: list[str] = []
        self.shutdown = False

    def __getattribute__(self, name):
        if name.startswith("nvml"):
            object.__getattribute__(self, "asked").append(name)
            if name in object.__getattribute__(self, "unsupported"):
                def nope(*a):
                    raise NVMLError("Not Supported")
                return nope
        return object.__getattribute__(self, name)

    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return "570.00"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=h["bus_id"])

    def nvmlDeviceGetClockInfo(self, h, t):
        return h["clocks"][t]

    def nvmlDeviceGetMaxClockInfo(self, h, t):
        return h["max_clocks"][t]

    def nvmlDeviceGetApplicationsClock(self, h, t):
        return h["app_clocks"][t]

    def nvmlDeviceGetDefaultApplicationsClock(self, h, t):
        return h["default_app_clocks"][t]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return h["reasons"]

    def nvmlDeviceGetPowerUsage(self, h):
        return h["power"]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return h["limit"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return h["enforced"]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return h["default_limit"]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return list(h["constraints"])

    def nvmlDeviceGetPersistenceMode(self, h):
        return h["persistence"]

    def nvmlDeviceGetEccMode(self, h):
        return list(h["ecc"])

    def nvmlDeviceGetMigMode(self, h):
        return list(h["mig"])

    def nvmlDeviceGetComputeMode(self, h):
        return h["compute_mode"]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h["temperature"]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return h["pcie"][0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return h["pcie"][1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h["pcie"][2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return h["pcie"][3]

    def nvmlDeviceGetCpuAffinity(self, h, words):
        return list(h["affinity"])[:words]

    def nvmlDeviceGetNumaNodeId(self, h):
        return h["numa_id"]


def make_tree(root, *, governor="performance", thp="always [madvise] never", defrag="always defer [madvise] never",
              gpu_numa="1", nodes=("0-1", "2-3"), cpufreq=True):
    """A fake /sys and /proc: 4 CPUs on two NUMA nodes, the GPU at 0000:1b:00.0."""
    def put(rel, text):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    put("proc/cpuinfo", "\n\n".join(f"processor\t: {i}\nmodel name\t: Fake EPYC 9999\nflags\t\t: fpu sse" for i in range(4)))
    put("proc/1/cgroup", "0::/")
    put("proc/sys/kernel/numa_balancing", "1")
    put("sys/devices/system/cpu/online", "0-3")
    for i in range(4):
        if cpufreq:
            put(f"sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor", governor)
            put(f"sys/devices/system/cpu/cpu{i}/cpufreq/scaling_driver", "acpi-cpufreq")
        else:
            (root / f"sys/devices/system/cpu/cpu{i}").mkdir(parents=True, exist_ok=True)
    for n, cpus in enumerate(nodes):
        put(f"sys/devices/system/node/node{n}/cpulist", cpus)
    put("sys/kernel/mm/transparent_hugepage/enabled", thp)
    put("sys/kernel/mm/transparent_hugepage/defrag", defrag)
    if gpu_numa is not None:
        put("sys/bus/pci/devices/0000:1b:00.0/numa_node", gpu_numa)
    return root


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """fake(gpus=[...], **tree_kwargs) -> (FakeNVML, root); this process runs on node 1's CPUs by default."""
    monkeypatch.setattr(audit_mod, "_process_cpus", lambda: {2, 3})

    def install(gpus=None, process_cpus=None, **tree):
        nv = FakeNVML([copy.deepcopy(GOOD_GPU)] if gpus is None else gpus)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        if process_cpus is not None:
            monkeypatch.setattr(audit_mod, "_process_cpus", lambda: set(process_cpus))
        return nv, str(make_tree(tmp_path, **tree))

    return install


def gpu(**changes):
    g = copy.deepcopy(GOOD_GPU)
    g.update(changes)
    return g


def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_cpulist("garbage") is None and parse_cpulist(None) is None


def test_readings(fake):
    nv, root = fake()
    a = audit(root=root)
    assert a["changes_nothing"] is True and "changes nothing" in a["note"] and "instant" in a["note"]
    assert a["nvml"]["available"] and a["nvml"]["driver"] == "570.00" and a["nvml"]["gpu_count"] == 1
    (g,) = a["gpus"]
    assert g["name"] == "NVIDIA H200" and g["bus_id"] == "00000000:1B:00.0"
    assert (g["sm_clock_mhz"], g["max_sm_clock_mhz"], g["mem_clock_mhz"], g["app_sm_clock_mhz"]) == (1980, 1980, 3201, 1980)
    assert g["clock_event_reasons"] == ["gpu_idle"] and g["clock_event_mask"] == 1
    assert (g["power_draw_w"], g["power_limit_w"], g["default_power_limit_w"], g["max_power_limit_w"]) == (120, 700, 700, 700)
    assert g["power_limit_range_w"] == [200, 700]
    assert g["persistence_mode"] is True and g["ecc"] == {"current": False, "pending": False} and g["mig_enabled"] is False
    assert g["compute_mode"] == "default" and g["temperature_c"] == 41
    assert (g["pcie_gen"], g["pcie_max_gen"], g["pcie_width"], g["pcie_max_width"]) == (5, 5, 16, 16)
    assert g["numa_node"] == 1 and g["numa_source"] == "sysfs" and g["cpu_affinity"] == "2-3"
    assert g["notes"] == []
    h = a["host"]
    assert h["cpu_model"] == "Fake EPYC 9999" and h["cpu_count"] == 4
    assert h["cpu_governors"] == {"performance": 4} and h["cpufreq_driver"] == "acpi-cpufreq"
    assert h["numa_nodes"] == {"0": {"cpus": "0-1", "count": 2}, "1": {"cpus": "2-3", "count": 2}}
    assert h["process_cpus"] == "2-3" and h["process_numa_nodes"] == [1] and h["numa_balancing"] == 1
    assert (h["thp_enabled"], h["thp_defrag"]) == ("madvise", "madvise")
    assert h["virtualization"] == {"container": False, "vm": False, "evidence": []}
    assert nv.shutdown


def test_good_machine_has_no_findings(fake):
    _, root = fake()
    assert findings(audit(root=root)) == []


def test_only_reads(fake, tmp_path):
    """No NVML setter is ever asked for, and the /sys + /proc tree is byte-for-byte and mtime-for-mtime unchanged."""
    nv, root = fake(gpus=[gpu(persistence=0, limit=400_000, ecc=(1, 1), mig=(1, 1), reasons=0x4)], governor="powersave")
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    report(root=root)
    assert before == {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    assert nv.asked and not [n for n in nv.asked if re.search(r"Set|Reset|Clear", n)]


# (GPU changes, tree changes, process CPUs) -> the one finding's `what` must contain this
RULES = [
    ("persistence", {"persistence": 0}, {}, None, "persistence mode"),
    ("power limit", {"limit": 450_000}, {}, None, "power limit"),
    ("power cap", {"reasons": 0x4 | 0x1000}, {}, None, "held back"),
    ("thermal", {"reasons": 0x40}, {}, None, "held back"),
    ("app clocks", {"app_clocks": {1: 1755, 2: 3201}, "default_app_clocks": {1: 1755, 2: 3201}}, {}, None, "application clocks"),
    ("pcie gen", {"pcie": (1, 5, 16, 16)}, {}, None, "PCIe"),
    ("pcie width", {"pcie": (5, 5, 8, 16)}, {}, None, "PCIe"),
    ("ecc", {"ecc": (1, 1)}, {}, None, "ECC"),
    ("mig", {"mig": (1, 1)}, {}, None, "MIG"),
    ("compute mode", {"compute_mode": 3}, {}, None, "compute mode"),
    ("governor", {}, {"governor": "powersave"}, None, "governor"),
    ("numa other node", {}, {}, {0, 1}, "NUMA"),
    ("numa unpinned", {}, {}, {0, 1, 2, 3}, "NUMA"),
    ("thp never", {}, {"thp": "always madvise [never]"}, None, "transparent hugepages"),
    ("thp defrag", {}, {"defrag": "[always] defer madvise never"}, None, "defrag"),
]


@pytest.mark.parametrize("gpu_changes,tree,cpus,what", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_rule_fires_alone(fake, gpu_changes, tree, cpus, what):
    _, root = fake(gpus=[gpu(**gpu_changes)], process_cpus=cpus, **tree)
    found = findings(audit(root=root))
    assert len(found) == 1, found
    (f,) = found
    assert isinstance(f, Finding) and what in f.what
    assert f.now and f.could_be and f.tends_to_buy and f.command_hint
    with pytest.raises(Exception):
        f.now = "x"  # frozen


def test_rule_details(fake):
    _, root = fake(gpus=[gpu(persistence=0, limit=450_000, default_limit=450_000, pcie=(1, 5, 16, 16),
                             ecc=(1, 0), mig=(1, 1), reasons=0x4)], process_cpus={0, 1})
    by = {f.what.split(": ", 1)[1]: f for f in findings(audit(root=root))}
    assert by["persistence mode"].command_hint.startswith("sudo nvidia-smi -i 0 -pm 1")
    assert by["persistence mode"].only_bare_metal
    assert by["power limit"].now == "450 W" and "700" in by["power limit"].could_be
    assert "-pl 700" in by["power limit"].command_hint
    assert "sw power cap" in by["clocks held back by power or temperature"].now
    pcie = by["PCIe link"]
    assert (pcie.now, pcie.could_be) == ("Gen1 x16", "Gen5 x16") and "idle" in pcie.tends_to_buy and "normal" in pcie.tends_to_buy
    assert "reboot" in by["ECC"].now and "reboot" in by["ECC"].command_hint  # off already pending
    assert "this one" in by["ECC"].tends_to_buy  # an H200 is an HBM part: ECC off typically buys nothing
    assert "whole-GPU" in by["MIG"].tends_to_buy
    numa = by["NUMA placement of the host process"]
    assert not numa.only_bare_metal and "numactl --cpunodebind=1 --membind=1" in numa.command_hint
    for f in by.values():  # any figure is a range said with "typically"; no invented precise percentages
        if "%" in f.tends_to_buy:
            assert "typically" in f.tends_to_buy
        assert not re.search(r"\d+\.\d+\s*%|\b\d+\s*%", f.tends_to_buy)


def test_ecc_on_a_gddr_part(fake):
    _, root = fake(gpus=[gpu(name=b"NVIDIA L40S", ecc=(1, 1))])
    (f,) = findings(audit(root=root))
    assert f.what == "GPU 0: ECC" and "typically a few %" in f.tends_to_buy and "reboot" in f.command_hint


def test_quiet_cases(fake):
    """Limit within 1% of max, idle/sync-boost reasons, ECC turning on at next reboot, one NUMA node: nothing."""
    _, root = fake(gpus=[gpu(limit=699_000, reasons=0x1 | 0x10, ecc=(0, 1), mig=(0, 1))], nodes=("0-3",),
                   process_cpus={0, 1, 2, 3})
    assert findings(audit(root=root)) == []
    _, root = fake(gpu_numa="-1")  # sysfs says no affinity -> falls back to NVML's node id
    g = audit(root=root)["gpus"][0]
    assert (g["numa_node"], g["numa_source"]) == (1, "nvml")


def test_gpus_with_the_same_finding_are_grouped(fake):
    b = gpu(persistence=0, bus_id=b"00000000:2A:00.0")
    _, root = fake(gpus=[gpu(persistence=0), b])
    (f,) = findings(audit(root=root))
    assert f.what == "GPUs 0,1: persistence mode" and "-i 0,1 " in f.command_hint
    a = audit(index=1, root=root)
    assert [g["index"] for g in a["gpus"]] == [1] and a["gpus"][0]["bus_id"] == "00000000:2A:00.0"
    a = audit(index=5, root=root)
    assert a["gpus"] == [] and "no GPU 5" in a["notes"][0]


def test_unsupported_queries_give_none_and_notes(monkeypatch, tmp_path):
    every = [n for n in dir(FakeNVML) if n.startswith("nvmlDevice") and n not in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")]
    nv = FakeNVML([copy.deepcopy(GOOD_GPU)], unsupported=every)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    a = audit(root=str(make_tree(tmp_path)))
    (g,) = a["gpus"]
    for key in ("name", "sm_clock_mhz", "power_limit_w", "persistence_mode", "ecc", "mig", "pcie_gen", "clock_event_reasons"):
        assert g[key] is None
    assert any(n.startswith("persistence_mode: Not Supported") for n in g["notes"])
    assert findings(a) == []


def test_nvml_missing_or_failing(fake, monkeypatch, tmp_path):
    root = str(make_tree(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    a = audit(root=root)
    assert a["gpus"] == [] and not a["nvml"]["available"] and "nvidia-ml-py" in a["notes"][0]
    assert a["host"]["cpu_governors"] == {"performance": 4}  # CPU/NUMA readings still there
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([], init_error="Driver Not Loaded"))
    a = audit(root=root)
    assert a["gpus"] == [] and "Driver Not Loaded" in a["notes"][0]


def test_empty_root_and_container_signs(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    h = audit(root=str(tmp_path))["host"]
    assert h["cpu_model"] is None and h["cpu_governors"] is None and h["numa_nodes"] is None and h["thp_enabled"] is None
    assert len(h["notes"]) >= 3
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu hypervisor\n")
    a = audit(root=str(tmp_path))
    assert a["host"]["virtualization"]["container"] and a["host"]["virtualization"]["vm"]
    assert any("host's owner" in n for n in a["notes"])
    a["host"]["cpu_governors"] = None  # no cpufreq visible -> no governor finding
    assert findings(a) == []


def test_real_machine_answers_with_notes():
    a = audit()  # whatever this machine is: never raises
    assert a["changes_nothing"] and isinstance(a["host"], dict)
    if not a["gpus"]:
        assert a["notes"]
    json.dumps(report())


def test_cli_json_and_table(fake, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # Rich wraps at the terminal width
    fake(gpus=[gpu(persistence=0)])  # the CLI reads the real /sys and /proc, with the fake NVML
    assert cli.main(["hw", "--audit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object
    assert set(out) == {"changes_nothing", "note", "readings", "findings"}
    assert out["changes_nothing"] is True
    assert set(out["readings"]) >= {"taken_at", "nvml", "gpus", "host", "notes"}
    assert any(f["what"] == "GPU 0: persistence mode" for f in out["findings"])
    assert set(out["findings"][0]) == {"what", "now", "could_be", "tends_to_buy", "only_bare_metal", "command_hint"}
    assert cli.main(["hw", "--audit"]) == 0
    text = capsys.readouterr().out
    assert "persistence mode" in text and "Ratchet changes nothing" in text and "nvidia-smi" in text
    assert cli.main(["hw", "--audit", "--device-name", "H200"]) == 2


def test_cli_subprocess_no_gpu():
    proc = subprocess.run([sys.executable, "-m", "ratchet", "hw", "--audit", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["changes_nothing"] and "readings" in out and isinstance(out["findings"], list)
