"""Warm worker starts: one process per judge with torch imported, forking a keeper per worker. TRUSTED.

A worker started with exec imports torch afresh: 1.5-2 s of a quiet core, 7-9 s on a 2-core machine
under load (2026-12-04), once or twice per evaluation, before the candidate's first line. The fork server
pays that once. It is started by the judge (``ForkServer.spawn``), imports torch and nothing of Ratchet's
that reads the environment, and then only forks: per request, a keeper (``box.keep``, exactly as the
keeper script runs it), whose own forked child enters the box and runs ``worker.main`` in the already
loaded interpreter. The worker is boxed from its first instruction of candidate work as before: the box
is applied in the single-threaded child, before any thread of its own exists.

What travels with a request, over a SOCK_SEQPACKET pair: the worker's environment, its box plan, and
its descriptors by SCM_RIGHTS (result socket, heartbeat pipe, log, and a status pipe). The forked keeper
closes every other descriptor first (the server's control socket, other workers' pipes), makes its own
session, points its stdout and stderr at the log and takes the worker's environment. The server reaps its
keepers and writes each one's exit status (a signed 32-bit integer, negative for a signal, as Popen's
returncode) into that keeper's status pipe; ``ForkedProcess`` reads it there.

Lifetimes: the server ends when its control socket reaches end of file, that is when the judge's process
is gone, however it ended; each keeper asks for SIGTERM when the server ends (PR_SET_PDEATHSIG), and then
ends its worker's whole tree as always. Every worker is forked by default (``enabled``);
``RATCHET_FORKSERVER=0`` starts every worker with exec. On the H200 (2026-12-04) forked GPU workers gave
the same clean passes as executed ones over 84 evaluations and cut a run's wall time per attempt from
2.0 to 1.3 s; on an H100 (2026-12-07) the GPU's fault tests (tests/faults/test_faults_gpu.py: an illegal
address, a spinning kernel, memory exhaustion, leaked memory) passed with forked and executed workers.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

OPT_OUT_ENV = "RATCHET_FORKSERVER"
_STATUS = struct.Struct("=i")
_MAX_REQUEST = 4 * 2**20  # a worker's environment and plan, as JSON
_FDS = 4  # result socket, heartbeat pipe, log, status pipe


def enabled() -> bool:
    """Whether a worker is forked (on a CPU or a GPU alike): yes unless ``RATCHET_FORKSERVER=0``. A server that
    cannot fork for its environment (its imports initialised CUDA) refuses once, and those workers are
    executed."""
    return os.environ.get(OPT_OUT_ENV, "") != "0"


# -- the judge's side --------------------------------------------------------------------------------
class ForkedProcess:
    """A keeper forked by the server, with the part of Popen's interface the judge uses. Not a child of
    the judge: its status comes through its status pipe, and it is signalled by pid (its session's
    leader, so ``os.killpg(pid, ...)`` reaches its group)."""

    def __init__(self, pid: int, status_fd: int):
        self.pid, self._status_fd, self.returncode = pid, status_fd, None
        os.set_blocking(status_fd, False)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                data = os.read(self._status_fd, _STATUS.size)
            except BlockingIOError:
                return None
            except OSError:
                data = b""
            if len(data) == _STATUS.size:
                self.returncode = _STATUS.unpack(data)[0]
            elif not data and not _exists(self.pid):  # the server is gone, and with it this keeper
                self.returncode = -signal.SIGTERM
            else:
                return None
            os.close(self._status_fd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"keeper {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig: int):
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# Variables read only after the fork (the build caches, the temporary folder, which GPU, Ratchet's own):
# they may differ between the workers of one server. Any other difference, such as OMP_NUM_THREADS (read
# when torch loads its thread pool) or TRITON_INTERPRET, gets a server of its own, started with it.
_LATE = frozenset({"TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
                   "CUPY_CACHE_DIR", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "CUDA_VISIBLE_DEVICES"})
_MAX_SERVERS = 3
READY_S = 300.0  # a server's imports, on a loaded machine (torch and torch._dynamo: 4-10 s there)


def _import_env(env: dict) -> frozenset:
    return frozenset((k, v) for k, v in env.items() if k not in _LATE and not k.startswith("RATCHET_"))


class ForkServer:
    """One fork server process, for the workers whose environment agrees with its own where it matters
    before the fork. ``spawn`` picks (or starts) the judge process's server for an environment."""

    _lock = threading.Lock()
    _servers: dict[frozenset, "ForkServer"] = {}
    _refused: dict[frozenset, str] = {}  # environments whose server would not fork, and why
    _owner = os.getpid()  # the process these servers answer
    _retired: list["ForkServer"] = []  # told to end after their last keeper, not yet gone

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from ratchet.judge.forkserver import main; main()", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            # Without what is only one worker's (its TMPDIR is that worker's scratch, removed with it).
            stderr=subprocess.DEVNULL, env={k: v for k, v in env.items() if k not in _LATE}, cwd="/",
            start_new_session=True)
        theirs.close()
        self.control = ours
        # Its first word, once its imports are done: "ready", or why it will not fork (then no worker of
        # this environment is forked again in this process).
        ours.settimeout(READY_S)
        try:
            hello = ours.recv(256).decode(errors="replace")
        except OSError:
            hello = ""
        ours.settimeout(None)
        if hello != "ready":
            self.stop()
            raise OSError(f"the worker fork server did not start ({hello or 'no answer'})")

    @classmethod
    def spawn(cls, env: dict, plan_arg: str, fds: tuple[int, int, int]) -> ForkedProcess:
        """Fork a keeper for one worker with environment ``env`` (PYTHONPATH absolute): ``fds`` are its
        result socket, heartbeat pipe and log (the caller keeps and closes its own copies). Raises OSError
        when no server answers."""
        if cls._owner != os.getpid():  # a forked copy of a judge: its parent's servers are not its own
            cls._servers, cls._refused, cls._owner = {}, {}, os.getpid()
        key = _import_env(env)
        if key in cls._refused:
            raise OSError(cls._refused[key])
        status_r, status_w = os.pipe()
        try:
            with cls._lock:
                for attempt in (1, 2):  # a server that died since its last worker is started again
                    server = cls._servers.get(key)
                    if server is None or server.proc.poll() is not None:
                        if server is not None:
                            cls._servers.pop(key).stop()
                        cls._prune_retired()
                        while len(cls._servers) >= _MAX_SERVERS:  # the oldest ends once its keepers have
                            oldest = cls._servers.pop(next(iter(cls._servers)))
                            oldest.retire()
                            cls._retired.append(oldest)
                        try:
                            server = ForkServer(env)
                        except OSError as exc:
                            cls._refused[key] = str(exc)
                            raise
                        cls._servers[key] = server
                    pid = server.request(env, plan_arg, (*fds, status_w))
                    if pid is not None:
                        return ForkedProcess(pid, status_r)
                    cls._servers.pop(key).stop()
                raise OSError("the worker fork server does not answer")
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)

    def request(self, env: dict, plan_arg: str, fds: tuple) -> int | None:
        try:
            socket.send_fds(self.control, [json.dumps({"env": env, "plan": plan_arg}).encode()], list(fds))
            reply = self.control.recv(64)
        except OSError:
            return None
        return int(reply) if reply else None

    @classmethod
    def _prune_retired(cls):
        for gone in [r for r in cls._retired if r.proc.poll() is not None]:
            gone.control.close()
            cls._retired.remove(gone)

    def retire(self):
        """No more workers from this server: it ends when its last keeper has (ending it now would end
        the evaluations in flight with it)."""
        try:
            self.control.send(b"retire")
        except OSError:
            pass

    def stop(self):
        self.control.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @classmethod
    def pids(cls) -> set[int]:
        """The servers' pids while they run (for checks that count a judge's processes)."""
        return {s.proc.pid for s in [*cls._servers.values(), *cls._retired] if s.proc.poll() is None}


# -- the server --------------------------------------------------------------------------------------
def main():
    control = socket.socket(fileno=int(sys.argv[1]))
    # Ctrl-C and the judge's own signals are the judge's business: the server ends with its socket.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    import warnings

    # torch's import leaves one native thread idle; nothing of it is used before a fork (Python 3.12
    # warns of every fork of a process with more than one thread).
    warnings.simplefilter("ignore", DeprecationWarning)
    import importlib

    import torch  # noqa: F401  (the point of this process)

    # What a candidate worker of a task with forbidden ops imports before its first call (its profiler's
    # torch._dynamo): as long again as torch itself (1.2-1.9 s on the CPU, 2026-12-04).
    importlib.import_module("torch._dynamo")

    try:
        import triton  # noqa: F401  (candidates and task files import it; its environment is read late)
    except ImportError:
        pass
    from ratchet.judge import box

    # A process that has initialised CUDA's driver cannot hand it to a forked child: the child's CUDA
    # calls would fail. Loaded is not initialised: torch's import maps libcuda (cuBLASLt opens it), and a
    # child forked after it used CUDA and Triton on the H200 (2026-12-04). Initialised, no worker is forked.
    if _cuda_driver_initialized():
        control.send(b"CUDA's driver was initialised by the imports, and a forked worker could not use the GPU")
        os._exit(0)
    control.send(b"ready")
    server = os.getpid()
    status_fds: dict[int, int] = {}
    retiring = False
    while True:
        ready, _, _ = select.select([control], [], [], 0.05)
        _reap(box, status_fds)
        if retiring and not status_fds:
            os._exit(0)
        if not ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, _FDS)
        except OSError:
            message, fds = b"", []
        if not message:  # the judge is gone: so are the keepers, by their parent-death signal
            os._exit(0)
        if message == b"retire" or len(fds) != _FDS:
            retiring = retiring or message == b"retire"
            for fd in fds:
                os.close(fd)
            continue
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _keeper(box, server, request, fds)
            finally:
                os._exit(code)
        for fd in fds[:3]:
            os.close(fd)
        status_fds[pid] = fds[3]
        control.send(str(pid).encode())


def _cuda_driver_initialized() -> bool:
    """Whether cuInit has run in this process, asked without running it: before cuInit the driver answers
    every call but cuInit with CUDA_ERROR_NOT_INITIALIZED (3). A driver not even loaded is not initialised."""
    try:
        with open("/proc/self/maps") as f:
            if not any("libcuda.so" in line for line in f):
                return False
        count = ctypes.c_int()
        return ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count)) != 3
    except OSError:
        return True  # cannot tell: do not fork


def _reap(box, status_fds: dict[int, int]):
    for pid, status in box.reap():
        fd = status_fds.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, _STATUS.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            os.close(fd)


def _keeper(box, server: int, request: dict, fds: list[int]) -> int:
    """In the forked keeper: nothing of the server's left open, a session of its own, the worker's
    environment; then the keeper's own code, with the worker forked instead of executed."""
    sock_fd, beat_fd, log_fd, status_fd = fds
    keep_open = {sock_fd, beat_fd, log_fd}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep_open:
            try:
                os.close(fd)
            except OSError:
                pass
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.environ.clear()
    os.environ.update(request["env"])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    plan = box.BoxPlan.from_arg(request["plan"])
    # The server's pid, read before the fork: keep() checks that it is still the parent.
    return box.keep(server, plan, [sock_fd, beat_fd], run_worker=lambda: _worker(sock_fd, beat_fd))


def _worker(sock_fd: int, beat_fd: int):
    """In the boxed worker: what the interpreter would have set from the environment at its start."""
    import tempfile

    sys.dont_write_bytecode = True
    tempfile.tempdir = None  # TMPDIR is the box's now
    sys.argv = ["ratchet-worker", "--fd", str(sock_fd), "--beat", str(beat_fd)]
    from ratchet.judge.worker import main as worker_main

    worker_main()
