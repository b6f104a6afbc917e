"""What this machine's device is, as torch (and pynvml, if present) report it. Reads only: measures nothing."""

from __future__ import annotations

import os
import platform

import torch

_PROPS = {  # torch device property -> key in the result, read where this torch build exposes it
    "multi_processor_count": "sms",
    "total_memory": "total_memory_bytes",
    "L2_cache_size": "l2_bytes",
    "shared_memory_per_block": "shared_memory_per_block_bytes",
    "shared_memory_per_block_optin": "shared_memory_per_block_optin_bytes",
    "shared_memory_per_multiprocessor": "shared_memory_per_sm_bytes",
    "regs_per_multiprocessor": "registers_per_sm",
    "warp_size": "warp_size",
    "max_threads_per_multi_processor": "max_threads_per_sm",
    "gcnArchName": "gcn_arch",
}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect() -> dict:
    """Facts about GPU 0 (and the count of GPUs), or ``device: None`` with the CPU when there is none."""
    if not torch.cuda.is_available():
        return {"device": None, "note": "no GPU detected: torch.cuda.is_available() is False",
                "cpu": cpu_model(), "cpu_cores": os.cpu_count(), "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    out: dict = {
        "device": props.name,
        "device_count": torch.cuda.device_count(),
        "compute_capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
    }
    for attr, key in _PROPS.items():
        value = getattr(props, attr, None)
        if value not in (None, ""):
            out[key] = value
    if "total_memory_bytes" in out:
        out["memory_gib"] = round(out["total_memory_bytes"] / 2**30, 1)
    if "l2_bytes" in out:
        out["l2_mib"] = round(out["l2_bytes"] / 2**20, 1)
    out.update(_nvml())
    out["ceilings"] = cached_ceilings(props.name, out.get("driver"))
    return out


def _nvml() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        driver = pynvml.nvmlSystemGetDriverVersion()
        out = {"driver": driver.decode() if isinstance(driver, bytes) else driver}
        for key, clock in (("max_sm_clock_mhz", pynvml.NVML_CLOCK_SM), ("max_mem_clock_mhz", pynvml.NVML_CLOCK_MEM)):
            try:
                out[key] = pynvml.nvmlDeviceGetMaxClockInfo(handle, clock)
            except Exception:
                pass
        return out
    except Exception:
        return {}


def cached_ceilings(name: str, driver: str | None) -> dict | None:
    """The usable measured ceilings of the device called ``name`` from the cache (this machine's own
    entry first, else the newest usable one of that device measured anywhere); never measures.
    ``driver``, when given, must match too."""
    from ratchet.hardware.ceilings import entry_problem, read_cache

    usable = [(key, entry) for key, entry in read_cache().items()
              if entry_problem(key, entry) is None and entry.get("device_name") == name
              and (driver is None or entry.get("driver") == driver)]
    if not usable:
        return None
    from ratchet.hardware.ceilings import JUDGE_CPU_THREADS, host_id

    # This host's, at the thread count the judge times with (GPU entries have none).
    here = [entry for _, entry in usable if entry.get("host") == host_id()
            and entry.get("threads") in (None, JUDGE_CPU_THREADS)]
    return max(here or [e for _, e in usable], key=lambda e: e.get("measured_unix", 0.0))
