"""Hardware counters of one judged candidate from Nsight Compute (``ncu``). NOT part of the judge.

The judge's verdict stands on its own; these counters only explain it (``ratchet.diagnose.bottleneck``'s
``classify_with_counters``). One profile is one ncu process over ``python -m ratchet.diagnose.ncu_target``, which
imports the candidate the way the judge's worker does, makes one input set on the GPU, warms up once
and calls the kernel once between ``cudaProfilerStart``/``Stop``; ncu runs with ``--profile-from-start
off`` so only that call's kernels are profiled (warm-up, compiles and input making are not).

Everything that can go wrong (no ncu, ``RATCHET_NCU=off``, no permission to read the counters, a
timeout, a candidate that fails under the profiler, output that does not parse) gives an
``NcuResult`` with ``available=False`` and a one-line ``why``: ``profile`` never raises.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

ENV = "RATCHET_NCU"  # a path to ncu, or off/0/no/false to never profile
OFF_VALUES = ("off", "0", "no", "false", "none")
TIMEOUT_S = 60.0
LAUNCH_CAP = 64  # kernels profiled in the one call; a call launching more is cut here (and says so)
DEFAULT_CUDA_HOME = "/usr/local/cuda"  # where CUDA installs put ncu when CUDA_HOME is not set
SOURCE = "ncu"
NOTE = "hardware counters from one ncu-profiled call; not from the judge, never used to keep or refuse"

# Our name -> ncu's metric name. Only plain hardware counters that exist on every GPU ncu supports from
# Volta on: an unknown name makes ncu refuse the whole run, so no section-only or newer-only metrics.
METRICS: dict[str, str] = {
    "duration_us": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",  # DRAM throughput, % of peak
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",  # "Compute (SM) Throughput", % of peak
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",  # achieved occupancy
    "registers": "launch__registers_per_thread",
    # Local-memory traffic: register spills (and local arrays the compiler could not keep in registers).
    "local_ld_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "local_st_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
}

# Unit scales to microseconds and bytes; ncu writes "nsecond" with --print-units base, scaled units else.
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}
_BYTES = {"byte": 1.0, "b": 1.0, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9,
          "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3}


@dataclass(frozen=True)
class NcuSettings:
    """How one profile runs: which ncu, how long it may take, how many kernels it profiles."""

    binary: str
    timeout_s: float = TIMEOUT_S
    launch_cap: int = LAUNCH_CAP


@dataclass(frozen=True)
class KernelCounters:
    """One profiled kernel launch (one row of ncu's raw page)."""

    name: str
    duration_us: float | None = None
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: int | None = None
    local_bytes: float | None = None  # local loads + stores: spills


@dataclass(frozen=True)
class Summary:
    """The call as a whole: percentages weighted by each kernel's duration, registers the most any kernel
    uses, local-memory bytes summed."""

    kernels: int
    duration_us: float | None
    dram_pct: float | None
    sm_pct: float | None
    occupancy_pct: float | None
    registers: int | None
    local_bytes: float | None
    longest_kernel: str = ""
    capped: bool = False  # the call launched more kernels than were profiled


@dataclass(frozen=True)
class NcuResult:
    available: bool
    why: str = ""
    kernels: tuple[KernelCounters, ...] = ()
    summary: Summary | None = None
    shape: Mapping[str, int] | None = None
    dtype: str | None = None
    permanent: bool = False  # the next profile would fail the same way (no ncu, no permission)
    command: tuple[str, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """What the ledger stores under the attempt's ``counters`` key: marked as ncu's, not the judge's."""
        out: dict[str, Any] = {"source": SOURCE, "note": NOTE, "available": self.available,
                               "shape": dict(self.shape) if self.shape else None, "dtype": self.dtype}
        if self.available:
            out["summary"] = asdict(self.summary)
            out["kernels"] = [asdict(k) for k in self.kernels]
            out["metrics"] = dict(METRICS)
        else:
            out["why"] = self.why
        return out


def unavailable(why: str, permanent: bool = False, **fields) -> NcuResult:
    return NcuResult(False, why=_one_line(why), permanent=permanent, **fields)


# -- finding ncu ---------------------------------------------------------------------------------------


def find_ncu() -> tuple[str | None, str]:
    """(path to ncu, "") or (None, why not). ``$RATCHET_NCU`` first (a path, or off), then PATH, then
    ``$CUDA_HOME/bin`` (or ``$CUDA_PATH``, ``/usr/local/cuda``): ncu often ships there but off PATH."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in OFF_VALUES:
        return None, f"ncu disabled ({ENV}={env})"
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env, ""
        return None, f"{ENV}={env} is not an executable file"
    found = shutil.which("ncu")
    if found:
        return found, ""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), DEFAULT_CUDA_HOME):
        if root:
            path = Path(root) / "bin" / "ncu"
            if path.is_file() and os.access(path, os.X_OK):
                return str(path), ""
    return None, f"ncu not found (not on PATH nor under CUDA_HOME/bin; set {ENV}=/path/to/ncu)"


# -- which call is profiled ----------------------------------------------------------------------------


def largest_public_shape(task) -> tuple[dict, str]:
    """The GPU shape set's largest public shape (by the task's byte count, else by the product of its
    sizes) in the task's first dtype: where a kernel's steady state shows, not its launch cost."""
    dtype = task.dtypes[0]

    def size(shape) -> float:
        cost = task.shape_cost(shape, dtype)
        if cost is not None and cost.bytes:
            return float(cost.bytes)
        return float(math.prod(v for v in shape.values() if isinstance(v, (int, float))))

    shape = max(task.shape_set("cuda").public, key=size)
    return dict(shape), str(dtype).removeprefix("torch.")


# -- running it ----------------------------------------------------------------------------------------


def command(settings: NcuSettings, log_file: str, target_args: list[str]) -> list[str]:
    """The ncu command line: the raw page (one row per kernel, one column per metric) as CSV, base units,
    only what runs between cudaProfilerStart and Stop, into ``log_file`` (the candidate's own prints go
    to stdout and cannot break the CSV). ``--clock-control none``: ncu locks the GPU's clocks to base while
    it profiles by default; Ratchet only reads the card's settings, never changes them."""
    return [settings.binary, "--csv", "--page", "raw", "--print-units", "base",
            "--profile-from-start", "off", "--target-processes", "all", "--clock-control", "none",
            "--launch-count", str(settings.launch_cap), "--metrics", ",".join(METRICS.values()),
            "--log-file", log_file, sys.executable, "-m", "ratchet.diagnose.ncu_target", *target_args]


def profile(task, candidate_path: str, config: Mapping[str, Any], shape: Mapping[str, int], dtype,
            gpu_index: int | None = None, timeout_s: float = TIMEOUT_S, kind: str = "ratchet") -> NcuResult:
    """Profile one call of the candidate under ncu; never raises (see the module's docstring)."""
    dtype_name = str(dtype).removeprefix("torch.")
    where = {"shape": dict(shape), "dtype": dtype_name}
    try:
        binary, why = find_ncu()
        if binary is None:
            return unavailable(why, permanent=True, **where)
        settings = NcuSettings(binary=binary, timeout_s=timeout_s)
        target = ["--task", task.source_path or task.name, "--candidate", str(candidate_path), "--kind", kind,
                  "--config", json.dumps(dict(config or {})), "--shape", json.dumps(dict(shape)),
                  "--dtype", dtype_name]
        env = dict(os.environ)
        if gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)  # the judged GPU is the target's "cuda"
        with tempfile.TemporaryDirectory(prefix="ratchet-ncu-") as tmp:
            log = os.path.join(tmp, "ncu.csv")
            cmd = command(settings, log, target)
            rc, out, timed_out = _run(cmd, env, settings.timeout_s)
            text = Path(log).read_text(errors="replace") if os.path.exists(log) else ""
        return interpret(text, out, rc, timed_out, settings, where, tuple(cmd))
    except Exception as exc:  # a profile is an extra: whatever broke, the loop goes on
        return unavailable(f"ncu profile failed: {type(exc).__name__}: {exc}", **where)


def _run(cmd: list[str], env: dict, timeout_s: float) -> tuple[int | None, str, bool]:
    """Run ``cmd`` in a session of its own so that a timeout ends ncu and the target it started."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        return None, out or "", True


def interpret(log_text: str, output: str, rc: int | None, timed_out: bool, settings: NcuSettings,
              where: dict, cmd: tuple[str, ...] = ()) -> NcuResult:
    """The result of one ncu run from its log (the CSV), its console output and exit status."""
    both = f"{log_text}\n{output}"
    if "ERR_NVGPUCTRPERM" in both:
        return unavailable("no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): an admin "
                           "must allow it (NVreg_RestrictProfilingToAdminUsers=0) or run ncu as root",
                           permanent=True, **where)
    if timed_out:
        return unavailable(f"ncu timed out after {settings.timeout_s:g} s", **where)
    target_error = next((line for line in both.splitlines() if line.startswith("ratchet-ncu-target: error:")), None)
    if target_error:
        return unavailable(target_error.removeprefix("ratchet-ncu-target: error:").strip(), **where)
    kernels = parse_csv(log_text) or parse_csv(output)
    if not kernels:
        error = next((line for line in both.splitlines() if line.startswith("==ERROR==")), None)
        if error:
            return unavailable(f"ncu: {error.removeprefix('==ERROR==').strip()}", **where)
        if rc:
            tail = [line for line in output.splitlines() if line.strip()][-1:] or [""]
            return unavailable(f"ncu exited with status {rc}: {tail[0]}", **where)
        return unavailable("ncu profiled no kernels in the measured call", **where)
    summary = summarize(kernels, capped=len(kernels) >= settings.launch_cap)
    return NcuResult(True, kernels=tuple(kernels), summary=summary, command=cmd, **where)


# -- parsing ncu's CSV ---------------------------------------------------------------------------------


def parse_csv(text: str) -> list[KernelCounters]:
    """Kernels from ncu's ``--csv --page raw`` output: a header row (ID, process and kernel columns, then
    one column per metric), a units row (empty under the fixed columns), one row per kernel launch.
    ``==PROF==``/``==WARNING==`` lines and anything before the header are skipped."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(lines))
    start = next((i for i, row in enumerate(rows) if row[:1] == ["ID"] and "Kernel Name" in row), None)
    if start is None:
        return []
    header = rows[start]
    body = [row for row in rows[start + 1:] if len(row) == len(header)]
    units: dict[str, str] = {}
    if body and body[0][0] == "":  # the units row
        units = dict(zip(header, body[0]))
        body = body[1:]
    column = {name: header.index(metric) for name, metric in METRICS.items() if metric in header}
    kernels = []
    for row in body:
        def value(name: str, default_unit: str = "") -> float | None:
            if name not in column:
                return None
            return _number(row[column[name]], units.get(header[column[name]]) or default_unit)

        ld, st = value("local_ld_bytes"), value("local_st_bytes")
        registers = value("registers")
        kernels.append(KernelCounters(
            name=row[header.index("Kernel Name")],
            duration_us=value("duration_us", "nsecond"),  # ncu's base unit for time
            dram_pct=value("dram_pct"), sm_pct=value("sm_pct"), occupancy_pct=value("occupancy_pct"),
            registers=None if registers is None else int(round(registers)),
            local_bytes=None if ld is None and st is None else (ld or 0.0) + (st or 0.0)))
    return kernels


def _number(cell: str, unit: str) -> float | None:
    """A cell as a number in microseconds (times) or bytes (sizes); ncu writes thousands separators
    ("1,234.5") and "n/a" for a metric it could not collect."""
    text = cell.strip().replace(",", "")
    try:
        number = float(text)
    except ValueError:
        return None
    key = unit.strip()
    if key in _TIME_US:
        return number * _TIME_US[key]
    return number * _BYTES.get(key.lower(), 1.0)


def summarize(kernels: list[KernelCounters], capped: bool = False) -> Summary:
    durations = [k.duration_us for k in kernels if k.duration_us is not None]

    def weighted(attr: str) -> float | None:
        pairs = [(getattr(k, attr), k.duration_us) for k in kernels if getattr(k, attr) is not None]
        if not pairs:
            return None
        total = sum(d for _, d in pairs if d)
        if not total or any(d is None for _, d in pairs):
            return sum(v for v, _ in pairs) / len(pairs)  # no durations to weight by: a plain mean
        return sum(v * d for v, d in pairs) / total

    registers = [k.registers for k in kernels if k.registers is not None]
    local = [k.local_bytes for k in kernels if k.local_bytes is not None]
    longest = max(kernels, key=lambda k: k.duration_us or 0.0).name if kernels else ""
    return Summary(kernels=len(kernels), duration_us=sum(durations) if durations else None,
                   dram_pct=weighted("dram_pct"), sm_pct=weighted("sm_pct"), occupancy_pct=weighted("occupancy_pct"),
                   registers=max(registers) if registers else None, local_bytes=sum(local) if local else None,
                   longest_kernel=longest, capped=capped)


# -- showing it ----------------------------------------------------------------------------------------


def describe(summary: Mapping[str, Any] | Summary | None) -> str:
    """``ncu: DRAM 91%, SM 23%, occupancy 48%, 40 regs, no spills`` (and the kernel count when the call
    launched more than one)."""
    if summary is None:
        return ""
    s = asdict(summary) if isinstance(summary, Summary) else dict(summary)
    parts = []
    for key, label in (("dram_pct", "DRAM"), ("sm_pct", "SM"), ("occupancy_pct", "occupancy")):
        if s.get(key) is not None:
            parts.append(f"{label} {s[key]:.0f}%")
    if s.get("registers") is not None:
        parts.append(f"{s['registers']} regs")
    local = s.get("local_bytes")
    if local is not None:
        parts.append("no spills" if local == 0 else f"spills {_size(local)} local")
    kernels = s.get("kernels") or 0
    if kernels > 1:
        parts.append(f"{kernels}{'+' if s.get('capped') else ''} kernels")
    return "ncu: " + ", ".join(parts) if parts else ""


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def profile_judged(task, candidate, config: Mapping[str, Any], verdict: str, device: str,
                   gpu_index: int | None = None, timeout_s: float = TIMEOUT_S) -> NcuResult:
    """Profile a judged candidate (``candidate.path``, ``candidate.kind``) on its task's largest public
    shape in the first dtype, if it passed on a GPU; else say why not. Never raises."""
    if device != "cuda":
        return unavailable("ncu profiles CUDA kernels; this candidate was judged on the CPU")
    if verdict != "pass":
        return unavailable(f"only passing candidates are profiled (verdict: {verdict})")
    try:
        shape, dtype = largest_public_shape(task)
    except Exception as exc:
        return unavailable(f"no public GPU shape to profile: {exc}")
    return profile(task, candidate.path, config, shape, dtype, gpu_index=gpu_index, timeout_s=timeout_s,
                   kind=getattr(candidate, "kind", "ratchet"))
