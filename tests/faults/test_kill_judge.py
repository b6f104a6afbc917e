"""No process outlives the judge: ``ratchet eval`` ended by SIGTERM or SIGKILL mid-evaluation takes its
keeper, its worker and the worker's children (one that ignores SIGTERM) with it within seconds, and its
scratch folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ratchet.judge import box

HERE = Path(__file__).parent
TASK = HERE.parent / "data" / "tasks" / "axpby.py"
CANDIDATE = HERE / "candidates" / "orphan_then_hang.py"


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_for(predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize("forked", ["1", "0"], ids=["fork server", "exec"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_ratchet_eval_ends_its_whole_tree(sig, forked, tmp_path):
    # Workers forked by the judge's fork server (judge/forkserver.py) and workers executed by a keeper
    # script alike: the server, its keepers, the worker and its child all go with the judge.
    marker = f"ratchet-fault-kill-{sig.name}-{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ, FAULT_MARKER=marker, RATCHET_FORKSERVER=forked)
    judge = subprocess.Popen([sys.executable, "-c", "import sys; from ratchet.cli import main; sys.exit(main())", "eval", str(TASK), str(CANDIDATE), "--device", "cpu",
                              "--json", "--no-timing"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        me = psutil.Process(judge.pid)

        def child_started():
            tree = me.children(recursive=True)
            return tree if any(marker in (p.cmdline() or []) for p in _safe(tree)) else None

        tree = wait_for(child_started, 180)  # a loaded machine starts torch slowly
        assert tree, "the candidate's child never started"
        child = next(p for p in _safe(tree) if marker in p.cmdline())
        scratch = child.cwd()  # the worker's folder, which its child shares: the scratch folder
        assert os.path.basename(scratch).startswith("ratchet-"), scratch
        lines = [" ".join(p.cmdline()) for p in _safe(tree)]
        starter = "ratchet.judge.forkserver" if forked == "1" else "ratchet.judge.worker"
        assert any(starter in line for line in lines), lines
        if forked == "0":
            assert any(box.__file__ in line for line in lines), lines  # the keeper script
        judge.send_signal(sig)
        judge.wait(timeout=10)
        wait_for(lambda: not alive(tree), 5)
        left = alive(tree)
        assert left == [], [p.cmdline() for p in _safe(left)]
        assert not os.path.exists(scratch)  # the keeper removed it: the judge could not
    finally:
        if judge.poll() is None:
            judge.kill()
            judge.wait()


def _safe(procs):
    out = []
    for p in procs:
        try:
            p.cmdline()
            out.append(p)
        except psutil.Error:
            pass
    return out
