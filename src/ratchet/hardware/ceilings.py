"""Measured ceilings of a device: copy bandwidth and dense matmul rate.

The roofline of every judged shape is its bytes over the bandwidth ceiling and its FLOPs over the
matmul ceiling; datasheet numbers are only leads, so both are measured and cached in
``~/.cache/ratchet/ceilings.json`` (``RATCHET_CACHE`` moves it).

A measured ceiling is only ever an *achievable* rate, a lower bound of the true peak: a low one makes the
roofline floor too high and refuses honest kernels. So a measurement is taken as the judge's workers time
(the same torch thread count, the same clock), robustly (several rounds of repeats, the best over a spread
of sizes), and it is cached only when the machine was not visibly busy (other processes left the
measurement no free core, or its rounds disagree). Each cache entry is keyed by the device, its driver,
the torch version, the thread count and the host, dated, and replaced once older than ``MAX_AGE_S``.
The judge re-measures before it refuses anything as ``beyond_roofline`` (judge/evaluation.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

# The judge's CPU workers time with one torch thread (judge/evaluation.py sets OMP_NUM_THREADS from this):
# a ceiling measured with torch's default threads on a busy machine read 20x under the one-thread rate
# (2026-12-01: 0.0007-0.0022 TB/s against 0.047-0.049), and refused every honest candidate.
JUDGE_CPU_THREADS = 1
# An entry is trusted this long, then measured again (drivers, clocks and machines change under a path).
MAX_AGE_S = 7 * 86400
# Rounds of one size whose best rates differ by more than this share: something else ran meanwhile.
MAX_SPREAD = 0.3
# A measurement that was not trusted (busy machine) is kept in this process only, this long.
UNTRUSTED_MEMO_S = 600.0

_LOCK = threading.Lock()  # one measurement at a time per process (it sets torch's thread count)
_MEMO: dict[str, "Ceilings"] = {}  # key -> the last measurement in this process, trusted or not


@dataclass(frozen=True)
class Ceilings:
    device_name: str
    driver: str
    copy_tbps: float  # bytes read plus bytes written per second, in TB/s (1e12)
    matmul_tflops: float  # dense matmul on random data (bf16 on GPUs, fp32 on CPUs), in TFLOP/s
    measured_at: str  # UTC, ISO 8601
    method: str
    torch_version: str = ""
    threads: int | None = None  # torch threads of the measurement (None on GPUs: they do not depend on it)
    host: str = ""
    measured_unix: float = 0.0
    spread: float = 0.0  # the largest relative disagreement of the rounds behind the ceilings
    trusted: bool = True  # False: the machine was busy; used for one judgement, never cached
    busy: str = ""  # why it was not trusted

    def floor_us(self, nbytes: float, flops: float) -> float:
        """The least time a call moving ``nbytes`` and doing ``flops`` can take on this device."""
        return max(nbytes / (self.copy_tbps * 1e12), flops / (self.matmul_tflops * 1e12)) * 1e6

    @property
    def key(self) -> str:
        return identity_key(self.device_name, self.driver, self.torch_version, self.threads, self.host)

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.measured_unix

    def best_with(self, other: "Ceilings | None") -> "Ceilings":
        """Both are achievable rates of the same device, so the true peak is at least the larger of each."""
        if other is None or other.key != self.key:
            return self
        copy, matmul = max(self.copy_tbps, other.copy_tbps), max(self.matmul_tflops, other.matmul_tflops)
        if (copy, matmul) == (self.copy_tbps, self.matmul_tflops):
            return self
        newest = self if self.measured_unix >= other.measured_unix else other
        return replace(newest, copy_tbps=copy, matmul_tflops=matmul,
                       trusted=self.trusted or other.trusted,
                       method=newest.method + "; the larger of two measurements of this key")


def cache_path() -> Path:
    root = Path(os.environ.get("RATCHET_CACHE", Path.home() / ".cache" / "ratchet"))
    return root / "ceilings.json"


def host_id() -> str:
    """This host and its CPU: a cache copied to another machine (or a container moved) is not trusted."""
    from ratchet.hardware.detect import cpu_model

    return f"{platform.node()} / {cpu_model()} x{os.cpu_count()}"


def device_identity(device: str) -> tuple[str, str]:
    """(device name, driver): what runs and briefs call the device."""
    if device == "cuda":
        name = torch.cuda.get_device_name(torch.cuda.current_device())  # the one a measurement uses
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


def judge_threads(device: str) -> int | None:
    return JUDGE_CPU_THREADS if device == "cpu" else None


def identity_key(name: str, driver: str, torch_version: str, threads: int | None, host: str) -> str:
    return " | ".join([name, driver, f"torch {torch_version}", f"threads {threads if threads else '-'}",
                       f"host {host}"])


def current_key(device: str, threads: int | None = None) -> str:
    name, driver = device_identity(device)
    return identity_key(name, driver, torch.__version__, threads if threads is not None else judge_threads(device),
                        host_id())


# -- the cache ----------------------------------------------------------------------------------------


def read_cache() -> dict[str, dict]:
    """Every entry of the cache file as stored (an unreadable or malformed file reads as empty)."""
    try:
        cache = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in cache.items() if isinstance(v, dict)} if isinstance(cache, dict) else {}


def entry_problem(key: str, entry: dict, now: float | None = None) -> str | None:
    """Why a cache entry cannot be used (None: it can): malformed, for another key, untrusted or too old."""
    names = {f.name for f in fields(Ceilings)}
    try:
        ceilings = Ceilings(**{k: v for k, v in entry.items() if k in names})
    except TypeError as exc:
        return f"malformed ({exc})"
    for rate in (ceilings.copy_tbps, ceilings.matmul_tflops):
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            return "malformed (a rate that is not a positive number)"
    if ceilings.key != key:
        return "stored under another key"
    if not ceilings.trusted:
        return "measured on a busy machine"
    age = ceilings.age_s(now)
    if not 0 <= age <= MAX_AGE_S:
        return f"measured {age / 86400:.1f} days ago (entries are trusted {MAX_AGE_S / 86400:.0f} days)"
    return None


def cached(device: str, threads: int | None = None) -> Ceilings | None:
    """This machine's usable cache entry for ``device``; never measures."""
    key = current_key(device, threads)
    entry = read_cache().get(key)
    if entry is None or entry_problem(key, entry):
        return None
    names = {f.name for f in fields(Ceilings)}
    return Ceilings(**{k: v for k, v in entry.items() if k in names})


def store(ceilings: Ceilings) -> None:
    """Replace this key's entry (and drop unusable ones), atomically: evaluations in other processes may
    read or write the file at the same moment."""
    cache = read_cache()
    cache = {k: v for k, v in cache.items() if entry_problem(k, v) is None}
    cache[ceilings.key] = asdict(ceilings)
    _write(cache)


def _write(cache: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ceilings.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f, indent=2)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still gets a measurement, just not a cached one


def refute(ceilings: Ceilings) -> bool:
    """Drop ``ceilings`` from the cache and this process's memo: something honest (the task's reference)
    ran faster than they allow, so they are too low. True when an entry was dropped from the file."""
    if _MEMO.get(ceilings.key) is not None and _MEMO[ceilings.key].copy_tbps == ceilings.copy_tbps:
        del _MEMO[ceilings.key]
    cache = read_cache()
    entry = cache.get(ceilings.key)
    if entry is None or entry.get("copy_tbps") != ceilings.copy_tbps or \
            entry.get("matmul_tflops") != ceilings.matmul_tflops:
        return False
    del cache[ceilings.key]
    _write(cache)
    return True


# -- getting ceilings --------------------------------------------------------------------------------


def get_ceilings(device: str, remeasure: bool = False, threads: int | None = None) -> Ceilings:
    """Ceilings for this device as the judge's workers time it: a usable cache entry, else measured now
    (and cached when the machine was quiet enough to trust the number). ``remeasure`` always measures."""
    threads = threads if threads is not None else judge_threads(device)
    key = current_key(device, threads)
    if not remeasure:
        memo = _MEMO.get(key)
        if memo is not None and (memo.trusted or memo.age_s() < UNTRUSTED_MEMO_S) and memo.age_s() <= MAX_AGE_S:
            return memo
        hit = cached(device, threads)
        if hit is not None:
            _MEMO[key] = hit
            return hit
    return remeasure_ceilings(device, threads)


def remeasure_ceilings(device: str, threads: int | None = None, attempts: int = 1) -> Ceilings:
    """A fresh measurement (up to ``attempts`` tries for a trusted one); a trusted one replaces the cache."""
    threads = threads if threads is not None else judge_threads(device)
    name, driver = device_identity(device)
    best = None
    for _ in range(max(1, attempts)):
        fresh = measure(device, name, driver, threads)
        best = fresh if best is None else fresh.best_with(best)
        if best.trusted:
            break
    if best.trusted:
        store(best)
    _MEMO[best.key] = best
    return best


# -- measuring ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _torch_threads(threads: int | None):
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _BusyMeter:
    """How many cores other processes used while a measurement ran (psutil's system-wide CPU times less
    this process's own)."""

    def __enter__(self):
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self._t0 = time.perf_counter()
        self._sys0, self._own0 = psutil.cpu_times(), self._proc.cpu_times()
        return self

    def __exit__(self, *exc):
        wall = max(time.perf_counter() - self._t0, 1e-6)
        sys1, own1 = self._psutil.cpu_times(), self._proc.cpu_times()
        idle = lambda t: t.idle + getattr(t, "iowait", 0.0)  # noqa: E731
        total = sum(sys1) - sum(self._sys0)
        busy_share = 1.0 - (idle(sys1) - idle(self._sys0)) / total if total > 0 else 0.0
        cores = os.cpu_count() or 1
        own = ((own1.user - self._own0.user) + (own1.system - self._own0.system)) / wall
        self.other_cores = max(0.0, busy_share * cores - own)
        self.free_cores = cores - self.other_cores
        return False


def measure(device: str, name: str, driver: str, threads: int | None = None) -> Ceilings:
    """One robust measurement: rounds of best-of repeats over a spread of sizes; the best size wins."""
    with _LOCK, _torch_threads(threads), _BusyMeter() as meter:
        if device == "cuda":
            copy, copy_spread = _best_over(_gpu_copy_tbps, (256 * 2**20, 1 * 2**30, 2 * 2**30))
            matmul, mm_spread = _best_over(_gpu_matmul_tflops, (4096, 8192))
            method = ("device-to-device copies of 256 MiB, 1 GiB and 2 GiB; 4096^3 and 8192^3 bf16 matmuls on "
                      f"random data; the best size, each the best of {ROUNDS} rounds of best-of-4 after warm-up")
            torch.cuda.empty_cache()  # the buffers go back: the judge's process keeps no GPU memory for this
        else:
            # CPU shapes are small and live in caches, so the ceiling that bounds them honestly is the cache
            # bandwidth, not DRAM: a result faster than a cache-resident copy is impossible.
            copy, copy_spread = _best_over(_cpu_copy_tbps, (64 * 2**10, 256 * 2**10, 1 * 2**20, 4 * 2**20))
            matmul, mm_spread = _best_over(_cpu_matmul_tflops, (256, 512))
            method = (f"cache-resident copies of 64 KiB to 4 MiB; 256^3 and 512^3 fp32 matmuls; {threads} torch "
                      f"thread(s) and perf_counter_ns as the workers time; the best size, each the best of {ROUNDS} "
                      "rounds")
    spread = max(copy_spread, mm_spread)
    busy = []
    if spread > MAX_SPREAD:
        busy.append(f"rounds disagreed by {spread:.0%} (more than {MAX_SPREAD:.0%})")
    # A core of its own per measuring thread is all a best-of measurement needs; a quarter of one less
    # is the noise of the psutil reading (the judge's own idle workers, the shell).
    needed = threads or 1
    if device == "cpu" and meter.free_cores < 0.75 * needed:
        busy.append(f"other processes kept {meter.other_cores:.1f} of {os.cpu_count()} cores busy")
    now = time.time()
    return Ceilings(name, driver, copy, matmul, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), method,
                    torch_version=torch.__version__, threads=threads, host=host_id(), measured_unix=now,
                    spread=round(spread, 4), trusted=not busy, busy="; ".join(busy))


ROUNDS = 5


def _best_over(rate_of_round, sizes) -> tuple[float, float]:
    """The best rate over ``sizes`` (each: the best of ``ROUNDS`` rounds) and that size's spread."""
    best, best_spread = 0.0, 0.0
    for size in sizes:
        rates = rate_of_round(size, ROUNDS)
        top = max(rates)
        if top > best:
            best, best_spread = top, (top - min(rates)) / top
    return best, best_spread


def _gpu_copy_tbps(nbytes: int, rounds: int) -> list[float]:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return [2 * nbytes / (ms * 1e-3) / 1e12 for ms in _cuda_round_ms(lambda: dst.copy_(src), rounds)]


def _gpu_matmul_tflops(n: int, rounds: int) -> list[float]:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return [2 * n**3 / (ms * 1e-3) / 1e12 for ms in _cuda_round_ms(lambda: torch.mm(a, b), rounds)]


def _cuda_round_ms(fn, rounds: int, reps: int = 4) -> list[float]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        out.append(min(times))
    return out


def _cpu_copy_tbps(nbytes: int, rounds: int) -> list[float]:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    reps = max(4, min(64, (16 * 2**20) // nbytes))  # small copies are cheap: more repeats
    return [2 * nbytes / s / 1e12 for s in _cpu_round_s(lambda: dst.copy_(src), rounds, reps)]


def _cpu_matmul_tflops(n: int, rounds: int) -> list[float]:
    a, b = torch.randn(n, n), torch.randn(n, n)
    reps = 8 if n <= 256 else 3
    return [2 * n**3 / s / 1e12 for s in _cpu_round_s(lambda: torch.mm(a, b), rounds, reps)]


def _cpu_round_s(fn, rounds: int, reps: int) -> list[float]:
    fn()
    out = []
    for _ in range(rounds):
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter_ns()  # the workers' CPU clock (judge/timing.py)
            fn()
            best = min(best, (time.perf_counter_ns() - t0) * 1e-9)
        out.append(max(best, 1e-9))
    return out
