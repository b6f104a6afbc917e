"""Measured ceilings of a device: copy bandwidth and dense matmul rate.

The roofline of every judged shape is its bytes over the bandwidth ceiling and its FLOPs over the
matmul ceiling; datasheet numbers are only leads, so both are measured once per device and driver and
cached in ``~/.cache/ratchet/ceilings.json`` (``RATCHET_CACHE`` moves it).
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Ceilings:
    device_name: str
    driver: str
    copy_tbps: float  # bytes read plus bytes written per second, in TB/s (1e12)
    matmul_tflops: float  # dense matmul on random data (bf16 on GPUs, fp32 on CPUs), in TFLOP/s
    measured_at: str
    method: str

    def floor_us(self, nbytes: float, flops: float) -> float:
        """The least time a call moving ``nbytes`` and doing ``flops`` can take on this device."""
        return max(nbytes / (self.copy_tbps * 1e12), flops / (self.matmul_tflops * 1e12)) * 1e6


def cache_path() -> Path:
    root = Path(os.environ.get("RATCHET_CACHE", Path.home() / ".cache" / "ratchet"))
    return root / "ceilings.json"


def device_identity(device: str) -> tuple[str, str]:
    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        driver = f"cuda {torch.version.cuda}"
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            pass
        return name, driver
    return f"cpu {platform.processor() or platform.machine()} x{os.cpu_count()}", f"torch {torch.__version__}"


def get_ceilings(device: str, remeasure: bool = False) -> Ceilings:
    """Cached ceilings for this device and driver, measured now if there are none."""
    name, driver = device_identity(device)
    key = f"{name} | {driver}"
    path = cache_path()
    cache = {}
    if path.exists():
        try:
            cache = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            cache = {}
    if key in cache and not remeasure:
        return Ceilings(**cache[key])
    ceilings = measure(device, name, driver)
    cache[key] = asdict(ceilings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets a measurement, just not a cached one
    return ceilings


def measure(device: str, name: str, driver: str) -> Ceilings:
    if device == "cuda":
        copy = _best_gpu_copy_tbps(2 * 2**30)
        matmul = _best_gpu_matmul_tflops(8192, torch.bfloat16)
        method = "2 GiB device-to-device copy; 8192^3 bf16 matmul on random data; best of 10 after warm-up"
    else:
        # CPU shapes are small and live in caches, so the ceiling that bounds them honestly is the cache
        # bandwidth, not DRAM: a result faster than a cache-resident copy is impossible.
        copy = _best_cpu_copy_tbps(4 * 2**20)
        matmul = _best_cpu_matmul_tflops(512)
        method = "4 MiB cache-resident copy; 512^3 fp32 matmul; best of 20"
    return Ceilings(name, driver, copy, matmul, time.strftime("%Y-%m-%d"), method)


def _best_gpu_copy_tbps(nbytes: int) -> float:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    best = _best_cuda_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (best * 1e-3) / 1e12


def _best_gpu_matmul_tflops(n: int, dtype: torch.dtype) -> float:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    best = _best_cuda_ms(lambda: torch.mm(a, b))
    return 2 * n**3 / (best * 1e-3) / 1e12


def _best_cuda_ms(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)


def _best_cpu_copy_tbps(nbytes: int) -> float:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    best = _best_cpu_s(lambda: dst.copy_(src))
    return 2 * nbytes / best / 1e12


def _best_cpu_matmul_tflops(n: int) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = _best_cpu_s(lambda: torch.mm(a, b))
    return 2 * n**3 / best / 1e12


def _best_cpu_s(fn, reps: int = 20) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
