"""The judge's handle on one worker subprocess: start, ask with limits, kill. TRUSTED.

Each worker runs under a keeper (judge/box.py) that boxes it and ends everything it started; the worker's
heartbeat (a pipe of its own) tells running from compiling, so a hang is stopped after its call's limit
while a long compile draws on the compile allowance.

Replies are unpickled with no globals allowed: the worker sends only builtins (dicts, lists, str,
bytes, numbers), so a candidate that writes its own objects into the channel cannot run code here.
Every reply must echo the request's nonce; anything else is a forged message.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import psutil

from ratchet.judge import box as box_module
from ratchet.judge import forkserver
from ratchet.judge.box import GRACE_S, BoxPlan, build_cache_env, remove_tree

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
LOG_TAIL_BYTES = 64 * 1024  # a worker may print megabytes: only the end of its log is read
CRASH_PREFIX = "ratchet-worker-crash:"  # the worker's own last word before it ends itself (worker.py)
# Lines that are never the reason a worker died.
_NOISE = re.compile(r"RuntimeWarning: '.*' found in sys.modules|warn\(RuntimeWarning\(msg\)\)|^\s*warnings.warn")


def _default_rss_bytes() -> int:
    """16 GiB, or half of this machine's memory where that is less: a runaway worker is stopped before
    the machine swaps or the kernel's OOM killer picks a process of its own choosing."""
    return min(16 * 2**30, psutil.virtual_memory().total // 2)


@dataclass(frozen=True)
class Limits:
    """What a candidate may cost. A call's time is split by the worker's heartbeat (twice a second: is the
    call inside a compiler?) into compiling and running: compiling (Triton's JIT and autotuning, torch's
    cpp_extension and inductor builds, a compiler child such as ninja, nvcc or ptxas) draws on one allowance
    per worker; running is limited per call. docs/reliability.md states the resulting worst cases."""

    import_s: float = 90.0  # running time of the candidate's import and the worker's start (CUDA init)
    first_call_s: float = 30.0  # running time of the first call, before any reference time is known
    compile_s: float = 300.0  # time inside compilers over a whole evaluation, per worker
    call_floor_s: float = 10.0  # each later call: this floor plus ...
    call_ref_factor: float = 50.0  # ... this many times the slowest reference call seen so far,
    call_s: float = 60.0  # ... at most this (also the limit of a fetch or a graph capture)
    total_s: float = 900.0  # one whole evaluation
    rss_bytes: int = field(default_factory=_default_rss_bytes)  # host memory of one worker and its children


class WorkerFailure(Exception):
    """The worker could not answer: ``code`` is a verdict reason code."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the worker sent an object of {module}.{name}")


class WorkerProcess:
    """A worker under its keeper (judge/box.py): boxed, in a session of its own, ended with all it started.

    ``box``: True to box the worker (the caller has checked that the OS can), False to run it unboxed
    (the user opted out). ``address_space`` caps the worker's virtual memory
    (RLIMIT_AS), for CPU workers only. ``device``: what the worker judges on ("cpu" or "cuda"), which
    decides whether it is forked from the fork server (judge/forkserver.py) or executed."""

    POLL_S = 0.05
    MEMORY_EVERY_S = 0.25  # the tree's RSS is read at most this often (psutil walks /proc)
    SILENT_S = 30.0  # a heartbeat silent this long (the GIL held in native code) no longer counts as compiling

    def __init__(self, limits: Limits, label: str, env: dict | None = None, box: bool = True,
                 address_space: int | None = None, device: str = "cpu"):
        self.limits, self.label = limits, label
        self.scratch = tempfile.mkdtemp(prefix=f"ratchet-{label}-")
        tmp = os.path.join(self.scratch, "tmp")
        os.mkdir(tmp)
        caches = build_cache_env()
        plan = BoxPlan(self.scratch, tuple(caches.values()), boxed=box, address_space_bytes=address_space)
        parent_sock, child_sock = socket.socketpair()
        beat_r, beat_w = os.pipe()
        os.set_blocking(beat_r, False)
        os.set_blocking(beat_w, False)
        self.log = tempfile.TemporaryFile(mode="w+b")
        child_env = dict(os.environ, **caches, **(env or {}))
        # The worker's folder is its scratch: relative paths on PYTHONPATH would point elsewhere there.
        if child_env.get("PYTHONPATH"):
            child_env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in child_env["PYTHONPATH"].split(os.pathsep) if p)
        child_env.update(TMPDIR=tmp, PYTHONDONTWRITEBYTECODE="1")
        self.proc = None
        if forkserver.enabled():  # torch already imported: a fork instead of a fresh interpreter
            try:
                self.proc = forkserver.ForkServer.spawn(child_env, plan.to_arg(),
                                                        (child_sock.fileno(), beat_w, self.log.fileno()))
            except OSError:
                pass  # no server to be had: the worker is executed below
        if self.proc is None:
            fds = (child_sock.fileno(), beat_w)
            worker = [sys.executable, "-c", "from ratchet.judge.worker import main; main()",
                      "--fd", str(child_sock.fileno()), "--beat", str(beat_w)]
            self.proc = subprocess.Popen(
                [sys.executable, "-P", box_module.__file__, str(os.getpid()), plan.to_arg(),
                 ",".join(map(str, fds)), "--", *worker],
                pass_fds=fds, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                env=child_env, start_new_session=True,
            )
        child_sock.close()
        os.close(beat_w)
        self.beats = beat_r
        self.conn = Connection(os.dup(parent_sock.fileno()))
        parent_sock.close()
        self.keeper = psutil.Process(self.proc.pid)
        self.compile_used_s = 0.0
        self._memory_at = 0.0

    def ask(self, msg: dict, timeout_s: float, run_s: float | None = None, limit_name: str = "call limit"
            ) -> tuple[dict, float]:
        """Send ``msg``, wait for its reply; returns the reply and the wall seconds it took.

        ``timeout_s`` bounds the wall time. ``run_s``, where given, bounds the time the worker spends
        running outside compilers (by its heartbeat): a hang is then stopped after ``run_s``, while time
        in compilers draws on the worker's compile allowance (``Limits.compile_s``)."""
        nonce = secrets.token_hex(8)
        msg = dict(msg, nonce=nonce, beat=run_s is not None)
        self._latest_beat()  # a beat written after the last call's reply was read belongs to that call
        t0 = time.perf_counter()
        try:
            self.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise self._died() from None
        deadline = t0 + timeout_s
        state, beat_at, tick, running = b"r", t0, t0, 0.0
        while not self.conn.poll(self.POLL_S):
            now = time.perf_counter()
            if run_s is not None:
                latest = self._latest_beat()
                if latest:
                    state, beat_at = latest, now
                elif state == b"c" and now - beat_at > self.SILENT_S:
                    state = b"r"
                if state == b"c":
                    self.compile_used_s += now - tick
                else:
                    running += now - tick
            tick = now
            if self.proc.poll() is not None:
                raise self._died()
            if run_s is not None and running > run_s:
                self.kill()
                raise WorkerFailure("timeout", f"{self.label}: hang: no return within {run_s:.1f} s ({limit_name}; "
                                               f"time in compilers not counted) ({msg['op']})")
            if self.compile_used_s > self.limits.compile_s:
                self.kill()
                raise WorkerFailure("timeout", f"{self.label}: compiling for more than {self.limits.compile_s:.0f} s "
                                               f"(the compile allowance) ({msg['op']})")
            if now > deadline:
                self.kill()
                raise WorkerFailure("timeout", f"{self.label}: no answer within {timeout_s:.1f} s ({msg['op']})")
            if now - self._memory_at > self.MEMORY_EVERY_S:
                self._memory_at = now
                self._check_memory()
        try:
            raw = self.conn.recv_bytes()
        except (EOFError, OSError):
            raise self._died() from None
        wall = time.perf_counter() - t0
        try:
            reply = _NoGlobals(io.BytesIO(raw)).load()
        except Exception as exc:
            self.kill()
            raise WorkerFailure("forged_result", f"{self.label}: unreadable reply ({exc})") from None
        if not isinstance(reply, dict) or reply.get("nonce") != nonce or self.conn.poll(0):
            self.kill()
            raise WorkerFailure("forged_result", f"{self.label}: a reply that does not answer the request")
        return reply, wall

    def _latest_beat(self) -> bytes | None:
        """The last state the worker's heartbeat wrote since the last look: b"c" compiling, b"r" running."""
        try:
            data = os.read(self.beats, 4096)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return None
        return data[-1:] if data[-1:] in (b"c", b"r") else None

    def strays(self) -> list[int]:
        """Processes that left the worker's own tree (a double fork, setsid) and came back to the keeper,
        its subreaper: the keeper's children other than the worker (the oldest). One /proc read."""
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            pids = [c.pid for c in self._tree() if c.ppid() == pid] if self.proc.poll() is None else []
        if len(pids) < 2:
            return []
        def born(p):
            try:
                return psutil.Process(p).create_time()
            except psutil.Error:
                return float("inf")
        return sorted(pids, key=born)[1:]

    def _tree(self) -> list:
        try:
            return self.keeper.children(recursive=True)
        except psutil.Error:
            return []

    def _check_memory(self):
        rss = sum(_rss_bytes(pid) for pid in self._tree_pids())
        if rss > self.limits.rss_bytes:
            self.kill()
            raise WorkerFailure("out_of_memory", f"{self.label}: used {rss / 2**30:.1f} GiB of host memory "
                                                 f"(limit {self.limits.rss_bytes / 2**30:.1f} GiB)")

    def _tree_pids(self) -> list[int]:
        """The keeper's descendants, walked through /proc's children files: a few reads per process of the
        tree, where psutil's children() reads every process on the machine (milliseconds on a busy host,
        which a timed batch's outside clock would see when the reply came meanwhile)."""
        pids, todo = [], [self.proc.pid]
        while todo and len(pids) < 10_000:
            pid = todo.pop()
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        todo += [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            if pid != self.proc.pid:
                pids.append(pid)
        return pids

    def _died(self) -> WorkerFailure:
        try:
            code = self.proc.wait(timeout=30)  # the keeper ends what the worker left, then exits
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        tail = self.log_tail()
        if code > 128:
            try:
                how = f"signal {code - 128} ({signal.Signals(code - 128).name})"
            except ValueError:
                how = f"signal {code - 128}"
        else:
            how = f"exit status {code}"
        return WorkerFailure("crash", f"{self.label}: worker died ({how})" + (f": {tail}" if tail else ""))

    def log_tail(self, lines: int = 3) -> str:
        """The worker's last lines on stderr, CUDA's own error line first where there is one."""
        try:
            self.log.seek(0, io.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - LOG_TAIL_BYTES))
            text = self.log.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        text = [line for line in text if line.strip() and not _NOISE.search(line)]
        crash = [line for line in text if line.startswith(CRASH_PREFIX)]
        if crash:
            return crash[-1].removeprefix(CRASH_PREFIX).strip()[:600]
        return " | ".join(text[-lines:])[-600:]

    def kill(self):
        """End the worker and everything it started: the keeper sends SIGTERM to all, waits a short grace,
        then SIGKILL; if the keeper itself does not go, its whole group and tree are killed from here."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=GRACE_S + 10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                tree = self._tree()
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
                for proc in tree:
                    try:
                        proc.kill()
                    except psutil.Error:
                        pass
                self.proc.wait(timeout=30)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.conn.send({"op": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.conn.close()
        self.log.close()
        os.close(self.beats)
        remove_tree(self.scratch)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0
