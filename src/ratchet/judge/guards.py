"""Anti-reward-hacking checks that run inside the worker around each call. TRUSTED.

What the worker reports can in principle be forged by code running in the same process, so every
guard here has an outside counterpart in the judge (outputs checked against a reference the worker
never sees, the parent's wall clock); these in-process checks name the cheat precisely when it is
a plain one. docs/judge.md lists each guard, its cost and what is not defended.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import torch

# Identities captured when the worker starts, before any candidate import.
_PRIMITIVES = {
    "time.perf_counter": (time, "perf_counter", time.perf_counter),
    "time.perf_counter_ns": (time, "perf_counter_ns", time.perf_counter_ns),
    "time.time": (time, "time", time.time),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
    "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
    "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize", torch.cuda.Event.synchronize),
    "torch.cuda.CUDAGraph.replay": (torch.cuda.CUDAGraph, "replay", torch.cuda.CUDAGraph.replay),
}

# Switches that let a kernel compute in less precision than the task's dtype. Each is read through
# the per-backend ``fp32_precision`` API where this torch has it (setting that API makes the legacy
# getters raise), and through the legacy attributes otherwise.
_PRECISION_ATTRS = [
    (torch.backends, "fp32_precision"),
    (torch.backends.cuda.matmul, "fp32_precision"),
    (getattr(torch.backends, "cudnn", None), "fp32_precision"),
    (getattr(getattr(torch.backends, "cudnn", None), "conv", None), "fp32_precision"),
    (getattr(getattr(torch.backends, "cudnn", None), "rnn", None), "fp32_precision"),
    (getattr(getattr(torch.backends, "mkldnn", None), "matmul", None), "fp32_precision"),
    (getattr(getattr(torch.backends, "mkldnn", None), "conv", None), "fp32_precision"),
    (torch.backends.cuda.matmul, "allow_fp16_accumulation"),
    (torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
    (torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
]
_PRECISION_ATTRS = [(o, a) for o, a in _PRECISION_ATTRS if o is not None and hasattr(o, a)]
_UNREADABLE = object()


def _read(owner, attr):
    try:
        return getattr(owner, attr)
    except Exception:  # a getter that raises was put in a state we did not leave it in
        return _UNREADABLE


def _precision_state() -> dict:
    state = {f"{getattr(o, '__name__', type(o).__name__)}.{a}": (o, a, _read(o, a)) for o, a in _PRECISION_ATTRS}
    try:
        state["torch.get_float32_matmul_precision"] = (None, None, torch.get_float32_matmul_precision())
    except Exception:
        state["torch.get_float32_matmul_precision"] = (None, None, _UNREADABLE)
    return state


_PRECISION_START = _precision_state()


def tampered_primitives() -> list[str]:
    """Names of timing primitives no longer the objects the worker started with."""
    return [f"timer_tampered:{name}" for name, (owner, attr, original) in _PRIMITIVES.items()
            if getattr(owner, attr, None) is not original]


def precision_flags_changed() -> list[str]:
    """Precision switches flipped by the kernel; put back so later calls are honest."""
    changed = [name for name, (_, _, value) in _precision_state().items()
               if value is _UNREADABLE or value != _PRECISION_START[name][2]]
    for name in changed:
        owner, attr, value = _PRECISION_START[name]
        try:
            if owner is None:
                torch.set_float32_matmul_precision(value)
            else:
                setattr(owner, attr, value)
        except Exception:
            pass
    return [f"precision_flags:{name}" for name in changed]


class HarnessIntegrity:
    """The harness's own functions, as they were before any candidate import.

    A kernel runs in the same process as the harness and can replace its methods, module functions
    or the result channel's send. Identities and code objects are recorded at start and compared
    before every reply; any difference is ``harness_tampered``.
    """

    def __init__(self, owners: list, conn):
        self.conn = conn
        self.conn_attrs = set(vars(conn))
        self.saved = []
        for owner in owners:
            for attr, value in list(vars(owner).items()):
                func = getattr(value, "__func__", value)
                code = getattr(func, "__code__", None)
                if code is not None or isinstance(value, type):
                    self.saved.append((owner, attr, value, code))

    def check(self) -> list[str]:
        bad = []
        for owner, attr, value, code in self.saved:
            now = vars(owner).get(attr)
            func = getattr(now, "__func__", now)
            if now is not value or (code is not None and getattr(func, "__code__", None) is not code):
                bad.append(f"{getattr(owner, '__name__', owner)}.{attr} was replaced")
        extra = set(vars(self.conn)) - self.conn_attrs
        if extra:
            bad.append(f"the result channel gained {sorted(extra)}")
        return bad


SUSPECT_SOURCE = (
    "_is_profiler_enabled", "_profiler_enabled", "sys._getframe", "gc.get_objects", "gc.get_referrers",
    "ratchet.judge", "sys.modules['__main__']", 'sys.modules["__main__"]', "import __main__",
)


def suspect_source(source: str) -> list[str]:
    """Names in a candidate's source that only code reaching into the judge needs (checked by the
    judge before the candidate runs; obfuscated access is left to the runtime checks)."""
    return [name for name in SUSPECT_SOURCE if name in source]


def keep_freed_memory_in_heap():
    """Make glibc keep large freed blocks in its heap instead of unmapping them, so the poison the
    worker frees is what the kernel's next allocation of that size gets (M_MMAP_THRESHOLD and
    M_TRIM_THRESHOLD raised to 1 GiB). Elsewhere than glibc this does nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


class Census:
    """Threads and child processes the kernel started during a call and left running.

    Thread pools that torch or Triton keep (OpenMP, compile workers) exist from warm-up on and are not
    counted; what counts is a Python thread or a child process born during the call and alive after it.
    """

    SETTLE_S = 0.005

    def __init__(self):
        self.process = psutil.Process()
        self._threads: set[int] = set()
        self._children: set[int] = set()
        self._children_files: dict[str, int] = {}  # thread id -> open fd of its children file

    def before(self):
        self._threads = {t.ident for t in threading.enumerate()}
        self._children = {c.pid for c in self._safe_children()}

    def settle(self):
        """Give threads that finish right after the call a moment, so a joined pool is not flagged."""
        new = [t for t in threading.enumerate() if t.ident not in self._threads and t.is_alive()]
        for t in new:
            t.join(self.SETTLE_S)

    def after(self) -> list[str]:
        flags = []
        threads = [t for t in threading.enumerate() if t.ident not in self._threads and t.is_alive()]
        threads = self._busy(threads)
        if threads:
            flags.append(f"background_thread:{len(threads)} new thread(s) alive after return "
                         f"({', '.join(t.name for t in threads[:3])})")
        children = [c for c in self._safe_children() if c.pid not in self._children]
        if children:
            flags.append(f"child_process:{len(children)} process(es) started by the kernel")
        return flags

    BUSY_WINDOW_S = 0.03  # CPU times tick in 10 ms steps

    def _busy(self, threads: list) -> list:
        """Of the new threads, those still using CPU: an idle pool thread parked on a queue is not
        work left running (what a thread writes later is caught when the outputs are fetched)."""
        if not threads:
            return []
        def cpu_times():
            try:
                return {t.id: t.user_time + t.system_time for t in self.process.threads()}
            except psutil.Error:
                return {}
        first = cpu_times()
        time.sleep(self.BUSY_WINDOW_S)
        second = cpu_times()
        return [t for t in threads if second.get(t.native_id, 0.0) > first.get(t.native_id, 0.0)]

    def _safe_children(self):
        """Direct children, read from /proc/self/task/*/children where Linux has it (psutil scans every
        process on the machine), else through psutil."""
        try:
            return [_Pid(p) for p in self._proc_children()]
        except OSError:
            pass
        try:
            return [c for c in self.process.children(recursive=True) if c.is_running()]
        except psutil.Error:
            return []

    def _proc_children(self) -> set[int]:
        """Each thread's children file, kept open and read again from offset 0: opening ~30 of them twice
        per timed call took ~0.6 ms of the worker's ~1.8 ms per call on the H200 host (2026-11-30); a pread
        of an open one takes ~1 us. A thread id that died (or was reused) is opened afresh."""
        tids = os.listdir("/proc/self/task")
        pids: set[int] = set()
        for tid in tids:
            data = self._read_children(tid)
            if data:
                pids.update(int(p) for p in data.split())
        for tid in set(self._children_files) - set(tids):  # threads gone since the last read
            os.close(self._children_files.pop(tid))
        return pids

    def _read_children(self, tid: str) -> bytes:
        fd = self._children_files.get(tid)
        if fd is not None:
            try:
                return os.pread(fd, 1 << 16, 0)
            except OSError:  # that thread ended; the id may belong to a new one now
                os.close(self._children_files.pop(tid))
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # ended between the listing and now
            return b""
        self._children_files[tid] = fd
        try:
            return os.pread(fd, 1 << 16, 0)
        except OSError:
            return b""


class _Pid:
    def __init__(self, pid: int):
        self.pid = pid
