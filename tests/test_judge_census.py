"""The census of threads and child processes a kernel leaves behind (judge.guards.Census), read from each
thread's /proc children file kept open between calls."""

import os
import subprocess
import sys
import threading

import pytest

from ratchet.judge.guards import Census

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc only")


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])


def test_a_child_started_by_a_thread_that_has_ended_is_counted_and_its_file_closed():
    census = Census()
    census.before()
    open_before = dict(census._children_files)
    children = []
    worker = threading.Thread(target=lambda: children.append(_sleeper()))
    worker.start()
    worker.join()
    try:
        flags = census.after()
        assert flags == ["child_process:1 process(es) started by the kernel"]
        # The ended thread's file is not kept open; the ones of live threads are reused, not reopened.
        assert set(census._children_files) == {str(t) for t in os.listdir("/proc/self/task")}
        assert all(census._children_files[tid] == fd for tid, fd in open_before.items()
                   if tid in census._children_files)
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_children_that_were_there_before_the_call_are_not_the_kernels():
    census = Census()
    old = _sleeper()
    try:
        census.before()
        assert census.after() == []
        new = _sleeper()
        try:
            assert census.after() == ["child_process:1 process(es) started by the kernel"]
        finally:
            new.kill()
            new.wait()
    finally:
        old.kill()
        old.wait()
