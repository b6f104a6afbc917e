"""``ratchet hw --audit``: what an owner of the bare metal could change on this machine, and what it tends to buy.

Reads only. Every reading comes from NVML ``nvmlDeviceGet*``/``nvmlSystemGet*`` queries (through pynvml, the
``nvidia-ml-py`` package, imported lazily) or from files under ``/sys`` and ``/proc`` opened for reading.
Nothing here sets a clock, a power limit, a mode or a governor, and nothing is written anywhere: the
findings only say what could be changed, by whom, and with which command.

Every reading is optional: a missing source (no pynvml, no driver, a query the GPU does not support, a
file a VM or container does not expose) gives ``None`` and a note, never an exception. The numbers are
readings at one instant: clocks, power draw, PCIe link and clock-event reasons move with load.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import time
from dataclasses import asdict, dataclass

NOTE = ("Ratchet changes nothing: these are readings at this instant (clocks, power draw, PCIe link and "
        "clock-event reasons move with load), and the findings say what the machine's owner could change.")

# Clock-event ("throttle") reason bits, as NVML defines them.
_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU is being held below the clock it asks for (idle, app clocks, sync boost are not).
_LIMITING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
_CLOCK_SM, _CLOCK_MEM = 1, 2  # NVML_CLOCK_SM, NVML_CLOCK_MEM
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
# Data-center parts with HBM, whose ECC costs no capacity: judged by name only.
_HBM = re.compile(r"\b(G?[HB]\d{2,3}|A100|A800|A30|V100|P100|MI\d{3}[A-Z]*)\b", re.I)


@dataclass(frozen=True)
class Finding:
    """One thing the machine's owner could change. Ratchet never changes it."""

    what: str
    now: str
    could_be: str
    tends_to_buy: str
    only_bare_metal: bool  # True: needs root on the host (or the BIOS), not something a tenant can do
    command_hint: str

    def to_json(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- helpers


def _read(path: str) -> str | None:
    """The stripped text of a file, or None if it cannot be read. Opens for reading only."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def parse_cpulist(text: str | None) -> set[int] | None:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}; None for unreadable text."""
    if text is None:
        return None
    cpus: set[int] = set()
    try:
        for part in text.replace("\n", ",").split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.update(range(int(lo), int(hi) + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        return None
    return cpus


def format_cpulist(cpus) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    cpus = sorted(cpus)
    parts: list[str] = []
    start = prev = None
    for c in cpus:
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = c
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def _bracketed(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip() or None


def _process_cpus() -> set[int] | None:
    """The CPUs this process may run on (its affinity mask), or None where the OS does not say."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _err(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    return msg.splitlines()[0][:160]


# ---------------------------------------------------------------------------------------------- host


def _host(root: str) -> dict:
    sysd = os.path.join(root, "sys")
    procd = os.path.join(root, "proc")
    notes: list[str] = []
    host: dict = {}

    # CPU model and count
    model = None
    flags: set[str] = set()
    cpuinfo = _read(os.path.join(procd, "cpuinfo"))
    processors = 0
    if cpuinfo is not None:
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key == "processor":
                processors += 1
            elif key in ("model name", "cpu model", "hardware") and model is None:
                model = value.strip() or None
            elif key == "flags" and not flags:
                flags = set(value.split())
    else:
        notes.append("cpu_model: /proc/cpuinfo not readable")
    host["cpu_model"] = model
    online = parse_cpulist(_read(os.path.join(sysd, "devices/system/cpu/online")))
    host["cpu_count"] = len(online) if online else (processors or None)
    if host["cpu_count"] is None:
        notes.append("cpu_count: neither /sys/devices/system/cpu/online nor /proc/cpuinfo says")

    # Frequency governor, summarized: {governor: number of CPUs}
    governors: dict[str, int] = {}
    epp: dict[str, int] = {}
    cpu_dirs = sorted(glob.glob(os.path.join(sysd, "devices/system/cpu/cpu[0-9]*")))
    for d in cpu_dirs:
        g = _read(os.path.join(d, "cpufreq/scaling_governor"))
        if g:
            governors[g] = governors.get(g, 0) + 1
        e = _read(os.path.join(d, "cpufreq/energy_performance_preference"))
        if e:
            epp[e] = epp.get(e, 0) + 1
    host["cpu_governors"] = governors or None
    host["cpu_energy_performance_preference"] = epp or None
    host["cpufreq_driver"] = _read(os.path.join(sysd, "devices/system/cpu/cpu0/cpufreq/scaling_driver"))
    if not governors:
        notes.append("cpu_governors: no cpufreq in /sys (typical of VMs and containers: the host owner sets it)")

    # NUMA nodes and their CPUs
    nodes: dict[str, dict] = {}
    for d in glob.glob(os.path.join(sysd, "devices/system/node/node[0-9]*")):
        cpus = parse_cpulist(_read(os.path.join(d, "cpulist")))
        if cpus is None:
            continue
        nodes[os.path.basename(d)[4:]] = {"cpus": format_cpulist(cpus), "count": len(cpus)}
    host["numa_nodes"] = dict(sorted(nodes.items(), key=lambda kv: int(kv[0]))) or None
    if not nodes:
        notes.append("numa_nodes: /sys/devices/system/node not readable")
    pcpus = _process_cpus()
    host["process_cpus"] = format_cpulist(pcpus) if pcpus else None
    if nodes and pcpus:
        host["process_numa_nodes"] = sorted(int(n) for n, v in nodes.items() if parse_cpulist(v["cpus"]) & pcpus)
    else:
        host["process_numa_nodes"] = None
    nb = _read(os.path.join(procd, "sys/kernel/numa_balancing"))
    host["numa_balancing"] = int(nb) if nb and nb.lstrip("-").isdigit() else None

    # Transparent hugepages
    host["thp_enabled"] = _bracketed(_read(os.path.join(sysd, "kernel/mm/transparent_hugepage/enabled")))
    host["thp_defrag"] = _bracketed(_read(os.path.join(sysd, "kernel/mm/transparent_hugepage/defrag")))
    if host["thp_enabled"] is None:
        notes.append("thp: /sys/kernel/mm/transparent_hugepage not readable")

    # Container / VM, where cheap to tell
    evidence: list[str] = []
    container = False
    for marker_file in (".dockerenv", "run/.containerenv"):
        if os.path.exists(os.path.join(root, marker_file)):
            container = True
            evidence.append(f"/{marker_file} exists")
    cgroup = _read(os.path.join(procd, "1/cgroup")) or ""
    marker = next((m for m in ("kubepods", "docker", "containerd", "libpod", "lxc") if m in cgroup), None)
    if marker:
        container = True
        evidence.append(f"/proc/1/cgroup mentions {marker}")
    vm = None
    if flags:
        vm = "hypervisor" in flags
        if vm:
            evidence.append("CPU flag 'hypervisor'")
    vendor = _read(os.path.join(sysd, "class/dmi/id/sys_vendor"))
    product = _read(os.path.join(sysd, "class/dmi/id/product_name"))
    if vendor or product:
        evidence.append(f"DMI: {' '.join(x for x in (vendor, product) if x)}")
    host["virtualization"] = {"container": container, "vm": vm, "evidence": evidence}
    host["notes"] = notes
    return host


# ---------------------------------------------------------------------------------------------- GPU


def _gpu(nv, i: int, host: dict, sysd: str) -> dict:
    notes: list[str] = []
    g: dict = {"index": i}

    def q(key, fn, *args, convert=lambda v: v):
        """One NVML query; its value (converted) or None with a note."""
        try:
            value = convert(getattr(nv, fn)(*args))
        except Exception as exc:  # NVMLError_NotSupported, a missing function in an old pynvml, ...
            notes.append(f"{key}: {_err(exc)}")
            value = None
        g[key] = value
        return value

    try:
        h = nv.nvmlDeviceGetHandleByIndex(i)
    except Exception as exc:
        return {"index": i, "notes": [f"handle: {_err(exc)}"]}

    q("name", "nvmlDeviceGetName", h, convert=_text)
    pci = q("bus_id", "nvmlDeviceGetPciInfo", h, convert=lambda p: _text(p.busId))
    # Clocks (MHz)
    q("sm_clock_mhz", "nvmlDeviceGetClockInfo", h, _CLOCK_SM)
    q("mem_clock_mhz", "nvmlDeviceGetClockInfo", h, _CLOCK_MEM)
    q("max_sm_clock_mhz", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_SM)
    q("max_mem_clock_mhz", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_MEM)
    q("app_sm_clock_mhz", "nvmlDeviceGetApplicationsClock", h, _CLOCK_SM)
    q("app_mem_clock_mhz", "nvmlDeviceGetApplicationsClock", h, _CLOCK_MEM)
    q("default_app_sm_clock_mhz", "nvmlDeviceGetDefaultApplicationsClock", h, _CLOCK_SM)
    # Clock-event reasons (the newer name first; older drivers/bindings only have the "throttle" one)
    mask, err = None, "not supported"
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        try:
            mask = int(getattr(nv, fn)(h))
            break
        except Exception as exc:
            err = _err(exc)
    if mask is None:
        notes.append(f"clock_event_reasons: {err}")
        g["clock_event_reasons"] = None
    else:
        g["clock_event_reasons"] = [name for bit, name in _REASON_BITS.items() if mask & bit]
    g["clock_event_mask"] = mask
    # Power (NVML reports milliwatts)
    w = lambda mw: round(mw / 1000.0, 1)  # noqa: E731
    q("power_draw_w", "nvmlDeviceGetPowerUsage", h, convert=w)
    q("power_limit_w", "nvmlDeviceGetPowerManagementLimit", h, convert=w)
    q("enforced_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h, convert=w)
    q("default_power_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", h, convert=w)
    limits = q("power_limit_range_w", "nvmlDeviceGetPowerManagementLimitConstraints", h,
               convert=lambda mm: [w(mm[0]), w(mm[1])])
    g["max_power_limit_w"] = limits[1] if limits else None
    # Modes
    q("persistence_mode", "nvmlDeviceGetPersistenceMode", h, convert=lambda v: bool(v))
    ecc = q("ecc", "nvmlDeviceGetEccMode", h, convert=lambda cp: {"current": bool(cp[0]), "pending": bool(cp[1])})
    g["ecc_enabled"] = ecc["current"] if ecc else None
    mig = q("mig", "nvmlDeviceGetMigMode", h, convert=lambda cp: {"current": bool(cp[0]), "pending": bool(cp[1])})
    g["mig_enabled"] = mig["current"] if mig else None
    q("compute_mode", "nvmlDeviceGetComputeMode", h, convert=lambda v: _COMPUTE_MODES.get(int(v), str(v)))
    q("temperature_c", "nvmlDeviceGetTemperature", h, _TEMPERATURE_GPU)
    # PCIe link
    q("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h)
    q("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h)
    q("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h)
    q("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", h)

    # NUMA affinity: sysfs numa_node, then NVML's node id, then NVML's CPU affinity mask.
    g["numa_node"], g["numa_source"], g["cpu_affinity"] = None, None, None
    sys_addr = _sysfs_pci_address(pci)
    if sys_addr:
        raw = _read(os.path.join(sysd, "bus/pci/devices", sys_addr, "numa_node"))
        if raw is not None and raw.lstrip("-").isdigit():
            if int(raw) >= 0:
                g["numa_node"], g["numa_source"] = int(raw), "sysfs"
            else:
                notes.append("numa_node: sysfs says -1 (no NUMA affinity reported: one node, or a VM)")
    ncpus = max((host.get("cpu_count") or 0), os.cpu_count() or 0, 1)
    try:
        words = nv.nvmlDeviceGetCpuAffinity(h, (ncpus + 63) // 64)
        affinity = {w_i * 64 + b for w_i, word in enumerate(words) for b in range(64) if int(word) >> b & 1}
        g["cpu_affinity"] = format_cpulist(affinity) if affinity else None
    except Exception as exc:
        affinity = set()
        notes.append(f"cpu_affinity: {_err(exc)}")
    if g["numa_node"] is None:
        try:
            node = int(nv.nvmlDeviceGetNumaNodeId(h))
            if node >= 0:
                g["numa_node"], g["numa_source"] = node, "nvml"
        except Exception:
            pass
    if g["numa_node"] is None and affinity and host.get("numa_nodes"):
        owners = [int(n) for n, v in host["numa_nodes"].items() if affinity <= (parse_cpulist(v["cpus"]) or set())]
        if len(owners) == 1:
            g["numa_node"], g["numa_source"] = owners[0], "nvml cpu affinity"
    g["notes"] = notes
    return g


def _sysfs_pci_address(bus_id: str | None) -> str | None:
    """NVML's '00000000:1B:00.0' -> sysfs's '0000:1b:00.0'."""
    if not bus_id:
        return None
    m = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id.strip())
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _gpus(index: int | None, host: dict, sysd: str) -> tuple[dict, list[dict]]:
    info: dict = {"available": False, "driver": None, "gpu_count": None, "note": None}
    try:
        nv = importlib.import_module("pynvml")
    except Exception as exc:
        info["note"] = (f"no GPU readings: pynvml (pip install nvidia-ml-py) is not importable ({_err(exc)}); "
                        "CPU and NUMA readings only")
        return info, []
    try:
        nv.nvmlInit()
    except Exception as exc:
        info["note"] = f"no GPU readings: NVML did not start ({_err(exc)}): no NVIDIA driver or GPU here?"
        return info, []
    try:
        info["available"] = True
        try:
            info["driver"] = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            info["note"] = f"no GPU readings: NVML could not count GPUs ({_err(exc)})"
            return info, []
        info["gpu_count"] = count
        if index is not None and not 0 <= index < count:
            info["note"] = f"no GPU {index}: NVML sees {count} GPU(s), indices 0-{count - 1}"
            return info, []
        info["note"] = "GPU indices are NVML's (nvidia-smi's) order; bus_id maps them to CUDA's"
        return info, [_gpu(nv, i, host, sysd) for i in ([index] if index is not None else range(count))]
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def audit(index: int | None = None, *, root: str = "/") -> dict:
    """Read (never change) the settings an owner of the bare metal could tune. ``index``: one GPU (NVML's
    order), or all. ``root``: where ``sys`` and ``proc`` are (tests point it at a fake tree)."""
    host = _host(root)
    nvml, gpus = _gpus(index, host, os.path.join(root, "sys"))
    notes = []
    if not gpus:
        notes.append(nvml["note"] or "no GPU readings")
    virt = host["virtualization"]
    if virt["container"] or virt["vm"]:
        notes.append("this looks like a " + " inside a ".join(x for x, on in (("container", virt["container"]),
                     ("VM", virt["vm"])) if on) + ": findings marked bare-metal need the host's owner")
    return {"changes_nothing": True, "note": NOTE, "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "nvml": nvml, "gpus": gpus, "host": host, "notes": notes}


# ---------------------------------------------------------------------------------------------- findings


def _ids(indices: list[int]) -> str:
    return ",".join(str(i) for i in indices)


def _label(indices: list[int]) -> str:
    return f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {_ids(indices)}"


def _gpu_findings(g: dict, host: dict) -> list[tuple[str, dict]]:
    """(rule, fields) pairs for one GPU; '{gpus}' and '{ids}' are filled in once GPUs with the same finding
    are grouped."""
    out: list[tuple[str, dict]] = []

    if g.get("persistence_mode") is False:
        out.append(("persistence", dict(
            what="{gpus}: persistence mode", now="off", could_be="on",
            tends_to_buy=("the driver keeps the GPU initialized between processes, so each new CUDA process "
                          "starts faster (typically a fraction of a second up to a few seconds per start, more "
                          "with many GPUs); nothing for kernel speed itself"),
            only_bare_metal=True, command_hint="sudo nvidia-smi -i {ids} -pm 1  (or run nvidia-persistenced)")))

    limit, top = g.get("power_limit_w"), g.get("max_power_limit_w")
    if limit is not None and top is not None and limit < top - max(1.0, 0.01 * top):
        default = g.get("default_power_limit_w")
        below = f" (default {default:g} W)" if default is not None and abs(default - limit) > 1 else ""
        out.append(("power_limit", dict(
            what="{gpus}: power limit", now=f"{limit:g} W{below}", could_be=f"{top:g} W (the most this board allows)",
            tends_to_buy=("higher sustained clocks on long compute-bound runs that hit the power cap "
                          "(typically a few % there); little or nothing for memory-bound or short kernels"),
            only_bare_metal=True, command_hint=f"sudo nvidia-smi -i {{ids}} -pl {top:g}")))

    reasons = g.get("clock_event_reasons") or []
    limiting = [r for r in reasons if r in _LIMITING]
    if limiting:
        sm, top_sm = g.get("sm_clock_mhz"), g.get("max_sm_clock_mhz")
        clock = f"; SM clock {sm} of {top_sm} MHz" if sm is not None and top_sm is not None else ""
        temp = f", {g['temperature_c']} C" if g.get("temperature_c") is not None else ""
        thermal = any("thermal" in r for r in limiting)
        out.append(("throttle", dict(
            what="{gpus}: clocks held back by power or temperature",
            now=", ".join(r.replace("_", " ") for r in limiting) + clock + temp,
            could_be="no power or thermal clock events under load",
            tends_to_buy=("the lost clock back: compute-bound kernels scale roughly with the SM clock, so the gap "
                          "between the current and the max SM clock is the most it buys; typically nothing for "
                          "memory-bound kernels. A reading at one instant: check again under a steady load"),
            only_bare_metal=True,
            command_hint=("check cooling and airflow, then power: " if thermal else "raise the power limit if below max; ")
            + "nvidia-smi -i {ids} -q -d PERFORMANCE,POWER,TEMPERATURE under load")))

    app, top_sm = g.get("app_sm_clock_mhz"), g.get("max_sm_clock_mhz")
    app_mem = g.get("app_mem_clock_mhz")
    if app is not None and top_sm is not None and app < top_sm:
        default = g.get("default_app_sm_clock_mhz")
        changed = default is not None and default != app
        out.append(("app_clocks", dict(
            what="{gpus}: application clocks", now=f"SM {app} MHz" + (f" (default {default} MHz)" if changed else ""),
            could_be=f"SM up to {top_sm} MHz",
            tends_to_buy=("matters only where the clock-event reasons show 'applications clocks setting' under "
                          "load; then typically a few % on compute-bound kernels, nothing on memory-bound ones"),
            only_bare_metal=True,
            command_hint=("sudo nvidia-smi -i {ids} -rac  (back to the defaults)" if changed else
                          f"sudo nvidia-smi -i {{ids}} -ac {app_mem if app_mem is not None else 'MEM'},SM  "
                          "(valid pairs: nvidia-smi -q -d SUPPORTED_CLOCKS)"))))

    gen, max_gen, width, max_width = (g.get(k) for k in ("pcie_gen", "pcie_max_gen", "pcie_width", "pcie_max_width"))
    gen_low = gen is not None and max_gen is not None and gen < max_gen
    width_low = width is not None and max_width is not None and width < max_width
    if gen_low or width_low:
        out.append(("pcie", dict(
            what="{gpus}: PCIe link",
            now=f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}",
            could_be=f"Gen{max_gen if max_gen is not None else '?'} x{max_width if max_width is not None else '?'}",
            tends_to_buy=("host<->device copy bandwidth, which scales with generation x width; nothing for kernels "
                          "that stay on the GPU. An idle GPU lowering its link generation to save power is normal "
                          "and retrains under load: read it again under load before acting"
                          + ("; a width below max under load usually means the slot, riser or BIOS setting"
                             if width_low else "")),
            only_bare_metal=True,
            command_hint="nvidia-smi -i {ids} -q -d PCIE (under load); lspci -vv for LnkSta vs LnkCap")))

    ecc = g.get("ecc") or {}
    if ecc.get("current"):
        pending = "" if ecc.get("pending") else " (off is already pending: it takes effect at the next reboot)"
        if _HBM.search(g.get("name") or ""):
            buys = ("on an HBM part like this one (judged from its name) typically nothing: HBM keeps its ECC bits "
                    "beside the data. ")
        else:
            buys = ("on parts whose ECC takes memory away (GDDR boards such as L40S or the RTX professional "
                    "cards) typically a few % of memory capacity and bandwidth; on HBM parts typically nothing. ")
        out.append(("ecc", dict(
            what="{gpus}: ECC", now="on" + pending, could_be="off (after a reboot)",
            tends_to_buy=buys + ("Costs error detection, and numbers measured with ECC off do not transfer to "
                                 "machines that keep it on"),
            only_bare_metal=True, command_hint="sudo nvidia-smi -i {ids} -e 0, then reboot")))

    mig = g.get("mig") or {}
    if mig.get("current"):
        out.append(("mig", dict(
            what="{gpus}: MIG", now="enabled", could_be="disabled",
            tends_to_buy=("whole-GPU results: with MIG on, a process sees one slice (part of the SMs, memory and "
                          "L2), so measured ceilings and kernel timings describe the slice, not the GPU"),
            only_bare_metal=True,
            command_hint="sudo nvidia-smi -i {ids} -mig 0  (no processes on the GPU; may need a GPU reset)")))

    mode = g.get("compute_mode")
    if mode in ("exclusive_process", "exclusive_thread", "prohibited"):
        out.append(("compute_mode", dict(
            what="{gpus}: compute mode", now=mode.replace("_", " "), could_be="default",
            tends_to_buy=("tools that open more than one CUDA process per GPU work" if mode != "prohibited"
                          else "CUDA works on this GPU at all"),
            only_bare_metal=True, command_hint="sudo nvidia-smi -i {ids} -c DEFAULT")))

    nodes = host.get("numa_nodes") or {}
    node = g.get("numa_node")
    pcpus = parse_cpulist(host.get("process_cpus"))
    if len(nodes) > 1 and node is not None and str(node) in nodes and pcpus:
        near = parse_cpulist(nodes[str(node)]["cpus"]) or set()
        if not pcpus <= near:
            where = host.get("process_numa_nodes") or []
            now = (f"this process may run on CPUs of NUMA node(s) {', '.join(map(str, where))}; "
                   f"the GPU hangs off node {node}")
            out.append((f"numa{node}", dict(
                what="{gpus}: NUMA placement of the host process", now=now,
                could_be=f"process and its memory on node {node} (CPUs {nodes[str(node)]['cpus']})",
                tends_to_buy=("faster, steadier host<->device copies and kernel launches from the near socket; "
                              "matters for copy-heavy and launch-bound work, typically nothing for GPU-resident "
                              "kernel time"),
                only_bare_metal=False,
                command_hint=f"numactl --cpunodebind={node} --membind={node} ratchet run ...")))
    return out


def findings(audit_result: dict) -> list[Finding]:
    """What the readings say an owner could change, and what it tends to buy. Changes nothing."""
    host = audit_result.get("host") or {}
    grouped: dict[tuple, list[int]] = {}
    order: list[tuple] = []
    for g in audit_result.get("gpus") or []:
        for rule, fields in _gpu_findings(g, host):
            key = (rule, tuple(sorted(fields.items())))
            if key not in grouped:
                grouped[key] = []
                order.append(key)
            grouped[key].append(g.get("index", 0))
    out: list[Finding] = []
    for key in order:
        ids = grouped[key]
        fields = dict(key[1])
        for name in ("what", "command_hint"):
            fields[name] = fields[name].replace("{gpus}", _label(ids)).replace("{ids}", _ids(ids))
        out.append(Finding(**fields))

    governors = host.get("cpu_governors") or {}
    slow = {name: n for name, n in governors.items() if name != "performance"}
    if slow:
        epp = host.get("cpu_energy_performance_preference") or {}
        pstate = (host.get("cpufreq_driver") or "") in ("intel_pstate", "amd-pstate-epp", "amd_pstate_epp")
        hint = ("; with this driver 'powersave' is its normal active mode and the energy_performance_preference "
                f"({', '.join(epp) if epp else 'unknown'}) matters as much" if pstate and "powersave" in slow else "")
        out.append(Finding(
            what="CPU frequency governor",
            now=", ".join(f"{name} on {n} CPU{'s' if n != 1 else ''}" for name, n in sorted(governors.items())),
            could_be="performance",
            tends_to_buy=("faster host-side launches: eager launch-bound microsecond kernels typically gain from "
                          "nothing up to a noticeable share of their launch time when the CPU does not clock down "
                          "between launches; CUDA-graph replays and long kernels typically gain nothing" + hint),
            only_bare_metal=True, command_hint="sudo cpupower frequency-set -g performance"))

    thp, defrag = host.get("thp_enabled"), host.get("thp_defrag")
    if thp == "never":
        out.append(_thp_finding(
            "enabled", what="transparent hugepages", now="never", could_be="madvise",
            tends_to_buy=("large host buffers that ask for huge pages get them (fewer TLB misses in host code); "
                          "typically a small gain for host-memory-heavy work, nothing for GPU kernel time")))
    if thp in ("always", "madvise") and defrag == "always":
        out.append(_thp_finding(
            "defrag", what="transparent hugepage defrag", now="always", could_be="madvise (or defer+madvise)",
            tends_to_buy=("no synchronous compaction stalls in host allocations: typically removes rare "
                          "millisecond-scale hiccups in host code, nothing for GPU kernel time")))
    return out


def _thp_finding(setting: str, **finding) -> Finding:
    """A transparent-hugepage setting (``/sys/kernel/mm/transparent_hugepage/<setting>``) that madvise would
    serve better: the host's to change, so bare metal only."""
    return Finding(**finding, only_bare_metal=True,
                   command_hint=f"echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/{setting}")


def report(index: int | None = None, *, root: str = "/") -> dict:
    """The readings and the findings as one JSON-able object (what ``ratchet hw --audit --json`` prints)."""
    readings = audit(index, root=root)
    readings.pop("changes_nothing", None)
    readings.pop("note", None)
    return {"changes_nothing": True, "note": NOTE, "readings": readings,
            "findings": [f.to_json() for f in findings(readings)]}
