"""Which process drives a run, and whether it is still alive.

A run records its owner (pid, host name and the process's start time) when ``ratchet run`` starts or
resumes it. A pid alone is not enough: after a SIGKILL the pid may be reused by an unrelated process,
so the owner counts as alive only while a process with that pid *and that start time* exists on the
same host. From another host nothing can be seen: such a run is taken at its word (``running``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psutil

# psutil derives start times from boot time and clock ticks: two reads of one process agree to far
# better than this, and two processes with the same pid are never started this close together.
START_TIME_SLACK_S = 1.0


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    started: float  # the process's start time, seconds since the epoch (psutil's create_time)


def host_name() -> str:
    return socket.gethostname()


def this_process() -> Owner:
    return Owner(pid=os.getpid(), host=host_name(), started=psutil.Process().create_time())


def owner_alive(pid: int | None, host: str | None, started: float | None) -> bool | None:
    """True or False for an owner on this host; None when it cannot be told (no owner recorded, or one
    on another host)."""
    if pid is None or host is None or host != host_name():
        return None
    try:
        process = psutil.Process(int(pid))
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # another user's process with that pid: it exists
        return True
    return started is None or abs(created - float(started)) <= START_TIME_SLACK_S
