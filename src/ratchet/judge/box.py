"""The box around candidate code, and the keeper that ends every process a worker started. TRUSTED.

Each worker runs as the child of a small keeper process (this file, run as a script: standard library
and psutil only, no torch, no candidate code). The keeper

- makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the worker starts, double-
  forked daemons included, stays its descendant even after its own parent is gone;
- asks for SIGTERM when the judge dies (PR_SET_PDEATHSIG), by SIGTERM, SIGKILL or a crash alike;
- starts the worker with PR_SET_PDEATHSIG(SIGKILL) and the box applied between fork and exec, so the
  worker is boxed from its first instruction and torch's own threads are born inside it;
- when the worker ends, or the judge asks (SIGTERM), or the judge is gone: SIGTERM to every descendant,
  a short grace, then SIGKILL, until it has no child left; then it exits with the worker's status.

The box is two kernel mechanisms that need no root, no setuid helper and no namespace:

- Landlock (ABI 3 or later: Linux 6.2; truncation is only covered from ABI 3): writes, creation, removal,
  renames and truncation are refused everywhere except the scratch folder and the compile caches; reads
  and execution stay allowed everywhere (Python, torch, CUDA libraries, /proc, /sys); device files
  (/dev/null, /dev/urandom, /dev/nvidia*) may be opened for writing and get their ioctls (ABI 5), which
  CUDA needs. From ABI 4, TCP bind and connect are refused; from ABI 6 the worker can neither signal nor
  reach an abstract unix socket of any process outside its box (the keeper and the judge included).
- A seccomp filter: socket() of any family but AF_UNIX fails with EACCES (UDP, raw, netlink, TCP below
  ABI 4), and io_uring_setup fails (io_uring can open sockets without the socket() call). AF_UNIX stays:
  the socket pair to the judge is one, and CUDA's MPS client connects through one.

Why not a network namespace (unshare(CLONE_NEWUSER | CLONE_NEWNET)): unprivileged user namespaces are
switched off or confined on many hosts (Ubuntu's AppArmor policy since 23.10, several container runtimes),
a new user namespace changes what the process sees of its own uid and of the GPU's device files, and a
namespace would still leave the file system open. Landlock and seccomp both ride on PR_SET_NO_NEW_PRIVS,
survive exec, are inherited by every child, and work in a Firecracker VM as on a laptop.

Not covered (docs/reliability.md): reads (a candidate may read any file the user can), connecting to a
unix socket that has a path (a daemon's socket the user may reach), CPU and GPU time beyond the judge's
limits, and writes through file descriptors that were open before the box (the worker has only its
result socket, its log and /dev/null).
"""

from __future__ import annotations

import ctypes
import errno
import glob
import json
import os
import platform
import signal
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

OPT_OUT_ENV = "RATCHET_NO_BOX"
MIN_LANDLOCK_ABI = 3
MAX_FILE_BYTES = 512 * 2**20
GRACE_S = 0.5  # between SIGTERM and SIGKILL of what a worker left behind

# prctl options
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
SECCOMP_MODE_FILTER = 2

# Landlock (include/uapi/linux/landlock.h)
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
AF_UNIX = 1

# Device files a worker opens for writing: the null and random devices, and the GPU's.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
DEVICE_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
# More /proc folders a worker may write (none needed on the H200 so far: its own pid's is always allowed).
PROC_WRITABLE: tuple[str, ...] = ()

# Where compilers keep their builds, and where the box points them when the user has not.
BUILD_CACHE_ENV = {
    "TRITON_CACHE_DIR": "triton",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache
    "CUPY_CACHE_DIR": "cupy",
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


@dataclass(frozen=True)
class BoxPlan:
    """What one worker may write: its scratch folder and the build caches; ``boxed`` False: nothing is
    restricted (the user opted out). ``address_space_bytes``: RLIMIT_AS (None on CUDA, whose driver
    reserves far more address space than it uses)."""

    scratch: str
    writable: tuple[str, ...]
    boxed: bool = True
    address_space_bytes: int | None = None

    def to_arg(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_arg(cls, text: str) -> "BoxPlan":
        data = json.loads(text)
        return cls(data["scratch"], tuple(data["writable"]), data["boxed"], data["address_space_bytes"])


# -- what the OS offers ------------------------------------------------------------------------------
def landlock_abi() -> int:
    """Landlock's ABI version, 0 where the kernel has none (or it is disabled)."""
    if platform.system() != "Linux":
        return 0
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(0, int(abi))


def _arch() -> tuple[int, int, int] | None:
    """(AUDIT_ARCH, socket, io_uring_setup) syscall numbers of this machine, None where unknown."""
    return {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}.get(platform.machine())


def unavailable() -> str | None:
    """Why candidates cannot be boxed here (one line), or None when they can."""
    abi = landlock_abi()
    if abi < MIN_LANDLOCK_ABI:
        have = f"Landlock ABI {abi}" if abi else "no Landlock"
        return (f"the judge's box needs Landlock ABI {MIN_LANDLOCK_ABI} or later (Linux 6.2+, 'landlock' in the "
                f"kernel's lsm= list) and this machine has {have}")
    if _arch() is None:
        return f"the judge's box has no seccomp filter for {platform.machine()}"
    return None


def opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "") not in ("", "0")


def refusal() -> str:
    """The one line the judge gives where the box is unavailable and the user did not opt out."""
    return (f"{unavailable()}; refusing to run candidate code unboxed. Set {OPT_OUT_ENV}=1 to judge without "
            "the box (candidate code can then write every file you can, the ledger included)")


def cache_root() -> Path:
    return Path(os.environ.get("RATCHET_CACHE", Path.home() / ".cache" / "ratchet")) / "build"


def build_cache_env() -> dict[str, str]:
    """The compile caches a worker writes: the user's own where set, else folders under ratchet's cache."""
    env = {}
    for name, sub in BUILD_CACHE_ENV.items():
        path = os.environ.get(name) or str(cache_root() / sub)
        Path(path).mkdir(parents=True, exist_ok=True)
        env[name] = str(Path(path).resolve())
    return env


# -- applying it (in the worker's child, between fork and exec) ---------------------------------------
def enter_box(plan: BoxPlan):
    """Everything the worker's process gets before its first instruction. Runs in the keeper's forked
    child, which has one thread: the restrictions then hold for every thread and process it makes."""
    import resource

    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if plan.address_space_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (plan.address_space_bytes, plan.address_space_bytes))
    # No file it writes grows past this, its log (stdout and stderr) included: a candidate printing
    # without end gets EFBIG (Python ignores SIGXFSZ) instead of filling the disk.
    # Never above a lower limit the judge itself runs under (a hard limit cannot be raised).
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = MAX_FILE_BYTES if hard == resource.RLIM_INFINITY else min(MAX_FILE_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    if not plan.boxed:
        return
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _landlock(plan)
    _seccomp_sockets()


def _prctl(option: int, value: int):
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer (rename and link across folders)
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def _landlock(plan: BoxPlan):
    abi = landlock_abi()
    handled_fs = _fs_rights(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("QQQ", handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr[:size], size)
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        _allow(ruleset, "/", read)
        for path in (plan.scratch, *plan.writable):
            _allow(ruleset, path, handled_fs)
        # The worker's own /proc entry (this process execs the worker, so the pid is the worker's): CUDA's
        # driver writes there at init (its threads' names under task/*/comm) and fails with error 304
        # ("OS call failed") when it cannot; measured on the H200, 2026-12-01. Writes only, nothing made.
        for path in (f"/proc/{os.getpid()}", *PROC_WRITABLE):
            _allow(ruleset, path, FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0))
        device = (FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
                  | (FS_IOCTL_DEV if abi >= 5 else 0))
        for path in (*DEVICE_FILES, *(p for pattern in DEVICE_GLOBS for p in glob.glob(pattern))):
            if os.path.exists(path) and not os.path.isdir(path):
                _allow(ruleset, path, device)
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: int):
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a device or folder that is not there needs no rule
    try:
        if not os.path.isdir(path):  # a file takes only the rights that apply to files
            rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)  # packed struct
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                         rule, ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _seccomp_sockets():
    """A classic BPF filter: socket(domain != AF_UNIX) and io_uring_setup fail with EACCES, and so does
    every syscall of another ABI (x32, 32-bit entry points, where socketcall would bypass the check)."""
    audit_arch, nr_socket, nr_io_uring = _arch()
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EACCES  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    prog = [
        (ld, 0, 0, 4),  # 0: arch
        (jeq, 1, 0, audit_arch),  # 1: native? -> 3
        (ret, 0, 0, deny),  # 2
        (ld, 0, 0, 0),  # 3: syscall number
        (jge, 5, 0, 0x40000000),  # 4: x32 -> 10
        (jeq, 4, 0, nr_io_uring),  # 5: -> 10
        (jeq, 1, 0, nr_socket),  # 6: -> 8
        (ret, 0, 0, allow),  # 7
        (ld, 0, 0, 16),  # 8: socket's domain (low half of args[0])
        (jeq, 1, 0, AF_UNIX),  # 9: -> 11
        (ret, 0, 0, deny),  # 10
        (ret, 0, 0, allow),  # 11
    ]
    code = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    filters = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filters))  # struct sock_fprog
    fprog_buf = ctypes.create_string_buffer(fprog, len(fprog))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buf), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


# -- the keeper ----------------------------------------------------------------------------------------
class _Stop(Exception):
    pass


def _stop(signum, frame):
    raise _Stop()


def end_descendants(grace_s: float = GRACE_S):
    """SIGTERM to every descendant, ``grace_s`` for them to go, then SIGKILL until none is left. As a
    subreaper every orphan comes back here, so the loop ends only when the whole tree is gone."""
    import psutil

    me = psutil.Process()

    def alive():
        _reap()
        try:
            return [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            return []

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        procs = alive()
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + wait_s
        while procs and time.monotonic() < deadline:
            time.sleep(0.02)
            procs = alive()
            if sig == signal.SIGKILL:
                for p in procs:  # forked between the listing and the signal
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
        if not procs:
            break
    _reap()


def remove_tree(path: str):
    """Remove a scratch folder, including what its candidate left without write or search permission."""
    import shutil

    if not os.path.lexists(path):
        return
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def reap():
    """Every ended child not yet waited for, as (pid, wait status); returns when none is left to reap."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def _reap():
    for _ in reap():
        pass


def keep(judge_pid: int, plan: BoxPlan, fds: list[int], cmd: list[str] | None = None, run_worker=None) -> int:
    """Start the worker in its box (``cmd`` executed, or ``run_worker`` called in a forked child: the fork
    server's way, judge/forkserver.py), wait for it, end all it left; returns its status. ``judge_pid``:
    the process that must stay this keeper's parent."""
    import subprocess

    import psutil  # noqa: F401  (now, while the worker starts, not in the cleanup the judge waits for)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop)
    status = 0
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != judge_pid:  # the judge died before the line above
            return 1
        worker = None
        if run_worker is not None:
            pid = _fork_worker(plan, run_worker)
        else:
            try:
                worker = subprocess.Popen(cmd, pass_fds=fds, cwd=plan.scratch, preexec_fn=lambda: enter_box(plan))
            except (OSError, subprocess.SubprocessError) as exc:
                print(f"box: could not start the worker in its box ({exc})", file=sys.stderr, flush=True)
                return 97
        for fd in fds:
            os.close(fd)
        code = worker.wait() if worker is not None else os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        status = code if code >= 0 else 128 - code
    except _Stop:
        status = 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        end_descendants()
        remove_tree(plan.scratch)  # here too: a judge killed by SIGKILL cannot
    return status


def _fork_worker(plan: BoxPlan, run_worker) -> int:
    """The worker as a forked child of this keeper: the keeper's signal handlers undone (exec would have),
    in its scratch folder, boxed, then ``run_worker()``; it never returns into the keeper's code."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 97
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(plan.scratch)
        enter_box(plan)
    except BaseException as exc:  # noqa: BLE001  (said on the worker's log, as the exec path says its own)
        print(f"box: could not start the worker in its box ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
        os._exit(code)
    try:  # from here on, ended as the interpreter would have ended the worker's main module
        run_worker()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code & 0xFF)


def main(argv: list[str]) -> int:
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1:]
    judge_pid, plan, fds = int(opts[0]), BoxPlan.from_arg(opts[1]), [int(f) for f in opts[2].split(",") if f]
    return keep(judge_pid, plan, fds, cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
