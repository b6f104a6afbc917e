"""The box itself (judge/box.py), below the judge: what a boxed process may and may not do, and that the
scratch folder goes with its evaluation."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge import box
from ratchet.task import load_task

DATA = Path(__file__).parent.parent / "data"

needs_box = pytest.mark.skipif(box.unavailable() is not None, reason=f"no box here: {box.unavailable()}")

PROBE = r"""
import errno, fcntl, os, socket, sys, termios
outside, scratch = sys.argv[1], sys.argv[2]
def errno_of(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
fd = os.open("/dev/null", os.O_RDWR)
print("dev_null_write", errno_of(lambda: os.write(fd, b"x")))
print("dev_ioctl", errno_of(lambda: fcntl.ioctl(fd, termios.TCGETS, bytes(64))))
print("read_outside", errno_of(lambda: open(outside).read()))
print("write_outside", errno_of(lambda: open(outside, "a").write("x")))
print("create_scratch", errno_of(lambda: open(os.path.join(scratch, "f"), "w").write("x")))
print("unix_pair", errno_of(lambda: socket.socketpair()))
print("udp", errno_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))
print("tcp6", errno_of(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)))
"""


@needs_box
def test_a_boxed_process_writes_only_its_scratch_and_keeps_device_ioctls(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plan = box.BoxPlan(str(scratch), ())
    proc = subprocess.run([sys.executable, "-c", PROBE, str(outside), str(scratch)], capture_output=True, text=True,
                          preexec_fn=lambda: box.enter_box(plan), timeout=60)
    seen = dict(line.split() for line in proc.stdout.splitlines())
    assert {k: int(v) for k, v in seen.items()} == {
        "dev_null_write": 0,
        # The ioctl reaches the device (which is no terminal) instead of being refused by the box.
        "dev_ioctl": errno.ENOTTY,
        "read_outside": 0,
        "write_outside": errno.EACCES,
        "create_scratch": 0,
        "unix_pair": 0,
        "udp": errno.EACCES,
        "tcp6": errno.EACCES,
    }, proc.stderr
    assert outside.read_text() == "kept\n" and (scratch / "f").read_text() == "x"


def test_a_plan_travels_as_one_argument():
    plan = box.BoxPlan("/tmp/s", ("/a", "/b"), boxed=False, address_space_bytes=123)
    assert box.BoxPlan.from_arg(plan.to_arg()) == plan


def test_build_caches_follow_the_users_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path / "rc"))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    env = box.build_cache_env()
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert env["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "rc" / "build" / "torch_extensions")
    assert all(Path(p).is_dir() for p in env.values())


def test_the_scratch_folder_goes_with_its_evaluation(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the judge makes its workers' scratch
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    v = evaluate(task, load_candidate(Path(__file__).parent / "candidates" / "write_scratch.py"), None,
                 JudgeOptions(device="cpu", time_it=False))
    assert v.verdict == "pass", v.reasons
    assert [p.name for p in tmp_path.glob("ratchet-*")] == []


def test_a_keeper_removes_the_scratch_folder_it_was_given(tmp_path):
    scratch = tmp_path / "scratch"
    (scratch / "locked").mkdir(parents=True)
    (scratch / "locked" / "f").write_text("x")
    (scratch / "locked").chmod(0)
    plan = box.BoxPlan(str(scratch), (), boxed=False)
    proc = subprocess.run([sys.executable, "-P", box.__file__, str(os.getpid()), plan.to_arg(), "", "--", "true"],
                          timeout=60)
    assert proc.returncode == 0 and not scratch.exists()
