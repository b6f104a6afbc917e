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

_PRECISION = {
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "torch.get_float32_matmul_precision": torch.get_float32_matmul_precision,
}
_PRECISION_START = {name: read() for name, read in _PRECISION.items()}


def tampered_primitives() -> list[str]:
    """Names of timing primitives no longer the objects the worker started with."""
    return [f"timer_tampered:{name}" for name, (owner, attr, original) in _PRIMITIVES.items()
            if getattr(owner, attr, None) is not original]


def precision_flags_changed() -> list[str]:
    """TF32 and matmul-precision switches flipped by the kernel; put back so later calls are honest."""
    changed = []
    for name, read in _PRECISION.items():
        if read() != _PRECISION_START[name]:
            changed.append(f"precision_flags:{name}")
    if changed:
        torch.backends.cuda.matmul.allow_tf32 = _PRECISION_START["torch.backends.cuda.matmul.allow_tf32"]
        torch.backends.cudnn.allow_tf32 = _PRECISION_START["torch.backends.cudnn.allow_tf32"]
        torch.set_float32_matmul_precision(_PRECISION_START["torch.get_float32_matmul_precision"])
    return changed


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
        if threads:
            flags.append(f"background_thread:{len(threads)} new thread(s) alive after return "
                         f"({', '.join(t.name for t in threads[:3])})")
        children = [c for c in self._safe_children() if c.pid not in self._children]
        if children:
            flags.append(f"child_process:{len(children)} process(es) started by the kernel")
        return flags

    def _safe_children(self):
        """Direct children, read from /proc/self/task/*/children where Linux has it (microseconds,
        where psutil scans every process on the machine), else through psutil."""
        try:
            pids = set()
            for task in os.scandir("/proc/self/task"):
                with open(f"/proc/self/task/{task.name}/children") as f:
                    pids.update(int(p) for p in f.read().split())
            return [_Pid(p) for p in pids]
        except OSError:
            pass
        try:
            return [c for c in self.process.children(recursive=True) if c.is_running()]
        except psutil.Error:
            return []


class _Pid:
    def __init__(self, pid: int):
        self.pid = pid
