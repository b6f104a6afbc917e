"""The judge's handle on one worker subprocess: start, ask with limits, kill. TRUSTED.

Replies are unpickled with no globals allowed: the worker sends only builtins (dicts, lists, str,
bytes, numbers), so a candidate that writes its own objects into the channel cannot run code here.
Every reply must echo the request's nonce; anything else is a forged message.
"""

from __future__ import annotations

import io
import os
import pickle
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import psutil


@dataclass(frozen=True)
class Limits:
    import_s: float = 180.0  # candidate import, CUDA init, Triton's first imports
    first_call_s: float = 300.0  # the first call compiles (Triton, cpp_extension builds)
    call_s: float = 60.0
    total_s: float = 900.0  # one whole evaluation
    rss_bytes: int = 16 * 2**30  # host memory of one worker


class WorkerFailure(Exception):
    """The worker could not answer: ``code`` is a verdict reason code."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the worker sent an object of {module}.{name}")


class WorkerProcess:
    POLL_S = 0.05

    def __init__(self, limits: Limits, label: str, env: dict | None = None):
        self.limits, self.label = limits, label
        parent_sock, child_sock = socket.socketpair()
        self.log = tempfile.TemporaryFile(mode="w+b")
        child_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ratchet.judge.worker", "--fd", str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            env=child_env, start_new_session=True,
        )
        child_sock.close()
        self.conn = Connection(os.dup(parent_sock.fileno()))
        parent_sock.close()
        self.ps = psutil.Process(self.proc.pid)

    def ask(self, msg: dict, timeout_s: float) -> tuple[dict, float]:
        """Send ``msg``, wait for its reply; returns the reply and the wall seconds it took."""
        nonce = secrets.token_hex(8)
        msg = dict(msg, nonce=nonce)
        t0 = time.perf_counter()
        try:
            self.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise self._died() from None
        deadline = t0 + timeout_s
        while not self.conn.poll(self.POLL_S):
            if self.proc.poll() is not None:
                raise self._died()
            if time.perf_counter() > deadline:
                self.kill()
                raise WorkerFailure("timeout", f"{self.label}: no answer within {timeout_s:.0f} s ({msg['op']})")
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

    def _check_memory(self):
        try:
            rss = self.ps.memory_info().rss
        except psutil.Error:
            return
        if rss > self.limits.rss_bytes:
            self.kill()
            raise WorkerFailure("out_of_memory", f"{self.label}: used {rss / 2**30:.1f} GiB of host memory "
                                                 f"(limit {self.limits.rss_bytes / 2**30:.0f} GiB)")

    def _died(self) -> WorkerFailure:
        code = self.proc.wait(timeout=10)
        tail = self.log_tail()
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return WorkerFailure("crash", f"{self.label}: worker died ({how})" + (f": {tail}" if tail else ""))

    def log_tail(self, lines: int = 3) -> str:
        try:
            self.log.seek(0)
            text = self.log.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(text[-lines:])[-600:]

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)  # the worker and anything it started
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
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
