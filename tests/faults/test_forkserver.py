"""Workers forked by the judge's fork server (judge/forkserver.py): each sees only its own descriptors,
is boxed and in its folder as an executed one is, and judges the same; the server ends with its judge."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, Limits, box, evaluate
from ratchet.judge.forkserver import ForkServer
from ratchet.judge.process import WorkerProcess
from ratchet.task import load_task

HERE = Path(__file__).parent
TASK = HERE.parent / "data" / "tasks" / "axpby.py"
HONEST = HERE.parent / "data" / "candidates" / "axpby_honest.py"
WRITES_TMP = HERE / "candidates" / "write_tmp.py"


def _links(pid: int) -> dict[int, str]:
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass
    return out


def _worker_of(worker: WorkerProcess) -> psutil.Process:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = worker.keeper.children()
        if children:
            return children[0]
        time.sleep(0.05)
    raise AssertionError("the keeper started no worker")


@pytest.fixture
def forked(monkeypatch):
    monkeypatch.setenv("RATCHET_FORKSERVER", "1")


def test_a_forked_worker_holds_only_its_own_socket_and_pipe(forked):
    first = WorkerProcess(Limits(), "fd-first")
    second = WorkerProcess(Limits(), "fd-second")
    try:
        assert ForkServer.pids(), "no fork server started"
        assert first.keeper.ppid() in ForkServer.pids()  # forked, not executed
        one, two = _worker_of(first), _worker_of(second)
        ends = {pid: {link for link in _links(pid).values() if link.startswith(("socket:", "pipe:"))}
                for pid in (one.pid, two.pid)}
        # Its result socket and heartbeat pipe; nothing of the other worker, the server or the judge.
        assert len(ends[one.pid]) == 2 and len(ends[two.pid]) == 2, ends
        assert not ends[one.pid] & ends[two.pid], ends
        server = next(iter(ForkServer.pids()))
        assert not {link for link in _links(server).values() if link.startswith("socket:")} & ends[two.pid]
        assert one.cwd() == first.scratch and two.cwd() == second.scratch
        assert os.getsid(first.keeper.pid) == first.keeper.pid  # its own session, as the keeper script makes
    finally:
        first.close()
        second.close()
    assert not os.path.exists(first.scratch) and not os.path.exists(second.scratch)


@pytest.mark.skipif(box.unavailable() is not None or box.opted_out(), reason="no box on this machine")
@pytest.mark.parametrize("mode", ["1", "0"], ids=["fork server", "exec"])
def test_verdicts_are_the_same_forked_or_executed(mode, monkeypatch, tmp_path):
    monkeypatch.setenv("RATCHET_FORKSERVER", mode)
    target = tmp_path / "outside.txt"
    monkeypatch.setenv("FAULT_TARGET", str(target))
    task = load_task(str(TASK))
    honest = evaluate(task, load_candidate(str(HONEST)), None, JudgeOptions(device="cpu", time_it=False))
    assert honest.verdict == "pass" and honest.reasons == [], honest.reasons
    boxed = evaluate(task, load_candidate(str(WRITES_TMP)), None, JudgeOptions(device="cpu", time_it=False))
    assert [r.code for r in boxed.reasons] == ["box_violation"], boxed.reasons
    assert not target.exists()


def test_the_server_ends_with_its_judge(tmp_path):
    # A judge that starts a worker and then dies without a word: its server reads the end of its socket.
    script = ("import os, sys\n"
              "from ratchet.judge.process import WorkerProcess, Limits\n"
              "from ratchet.judge.forkserver import ForkServer\n"
              "w = WorkerProcess(Limits(), 'orphan-judge')\n"
              "print(*ForkServer.pids(), w.keeper.pid, flush=True)\n"
              "os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, RATCHET_FORKSERVER="1"), cwd=tmp_path)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                               for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert left == [], left


def test_a_worker_starts_by_exec_when_no_server_can_be_had(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("the worker fork server did not start (simulated)")

    monkeypatch.setenv("RATCHET_FORKSERVER", "1")
    monkeypatch.setattr(ForkServer, "spawn", refuse)
    task = load_task(str(TASK))
    verdict = evaluate(task, load_candidate(str(HONEST)), None, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "pass" and verdict.reasons == [], verdict.reasons


def test_by_default_every_worker_is_forked_and_zero_executes_them(monkeypatch):
    from ratchet.judge import forkserver

    monkeypatch.delenv("RATCHET_FORKSERVER", raising=False)
    assert forkserver.enabled()
    monkeypatch.setenv("RATCHET_FORKSERVER", "1")
    assert forkserver.enabled()
    monkeypatch.setenv("RATCHET_FORKSERVER", "0")
    assert not forkserver.enabled()


def test_a_retired_server_ends_after_its_last_keeper_not_before(monkeypatch):
    from ratchet.judge import forkserver

    monkeypatch.setenv("RATCHET_FORKSERVER", "1")
    monkeypatch.setattr(forkserver, "_MAX_SERVERS", 1)
    first = WorkerProcess(Limits(), "retire-first")
    old_server = first.keeper.ppid()
    second = WorkerProcess(Limits(), "retire-second", env={"OMP_NUM_THREADS": "3"})  # a server of its own
    try:
        assert second.keeper.ppid() != old_server
        time.sleep(0.5)
        assert psutil.pid_exists(old_server) and first.proc.poll() is None  # its keeper still serves
        assert old_server in ForkServer.pids()
    finally:
        first.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and old_server in ForkServer.pids():
        time.sleep(0.05)
    assert old_server not in ForkServer.pids()
    second.close()
