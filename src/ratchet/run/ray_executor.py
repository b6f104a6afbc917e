"""Evaluations on a Ray cluster (``ratchet run --executor ray [--address ADDR]``; docs/scale.md).

One Ray actor per GPU of the cluster (``num_gpus=1``, wherever Ray places it), or for ``--device cpu``
one per CPU of the cluster. Each actor is a warm judge: the task loaded once, and on a GPU one device
lock shared by the 1 + LOOKAHEAD evaluations it runs at once (threads of the actor), so their starts,
compiles and checks overlap on the node's CPU cores while one at a time is timed alone on its GPU,
exactly as the local loop does on each GPU of one machine. The judge inside is the same code: the
driver ships its own ``ratchet`` package to the cluster (Ray's ``runtime_env`` ``py_modules``) and
refuses actors whose judge sources differ from its own.

The proposers, the keep rule and the ledger stay with the driver; an evaluation carries only the
candidate's source, its config and the run's race bars out, and a verdict back, with where it ran
(``placement``: node, GPU name, actor pid), kept in the attempt's ``extra``.

Faults: an actor lost mid-evaluation (its process killed, its node gone) is restarted by Ray
(``max_restarts=-1``) and the evaluation is retried once on another actor, on another node where
there is one; a second loss records the attempt as an ``error`` with reason ``lost`` and both
failures, never drops it. A driver killed mid-run loses only what was in flight (never recorded);
``--resume`` picks the run up on the same cluster or another (``--address``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from ratchet.candidate import Candidate
from ratchet.judge.race import RaceBar
from ratchet.run.executor import LOOKAHEAD, ExecutorError
from ratchet.task import BUILTIN_TASKS_DIR, Task, load_task

INSTALL = "pip install 'ratchet[ray]'"
# Actors not up by then (no free GPU in the cluster, an image without Ratchet's dependencies) stop the
# start with one line, rather than a run waiting for ever.
STARTUP_S = 300.0
# The judge ends an evaluation itself within its limits (900 s, docs/design.md); past this the actor is
# taken as lost (a node that stopped answering).
EVALUATION_S = 1800.0


def require_ray():
    """Ray's module, or an ExecutorError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"--executor ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # ray.init's address; None: $RAY_ADDRESS, a cluster on this machine, or a new one
    num_cpus: int | None = None  # only when a new local cluster is started (tests)
    retries: int = 1  # evaluations retried after a loss, each on another actor
    startup_s: float = STARTUP_S
    evaluation_s: float = EVALUATION_S


def judge_fingerprint() -> str:
    """A hash of the judge's sources: the driver and every actor must judge with the same code."""
    folder = Path(__file__).resolve().parent.parent / "judge"
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def connect(settings: RaySettings) -> bool:
    """Connect to the cluster (or start a local one), shipping this Ratchet to its workers. Returns False
    when Ray was connected already (by the caller, with its own runtime_env), True otherwise."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    import logging

    import ratchet

    kwargs: dict[str, Any] = {"address": settings.address, "log_to_driver": False, "logging_level": logging.WARNING,
                              "runtime_env": {"py_modules": [str(Path(ratchet.__file__).resolve().parent)]}}
    if settings.address is None:
        kwargs.update(include_dashboard=False, **({"num_cpus": settings.num_cpus} if settings.num_cpus else {}))
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = settings.address or "the default address"
        raise ExecutorError(f"cannot reach the Ray cluster at {where}: {' '.join(str(exc).split())[:300]}") from None
    return True


# -- what travels to the cluster --------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRef:
    """A task as the cluster loads it: a built-in by name, a task file by its text (a worker node need
    not have the driver's files)."""

    spec: str  # a built-in name, or the driver's path of the file
    text: str | None = None

    @classmethod
    def of(cls, task: Task) -> "TaskRef":
        path = Path(task.source_path) if task.source_path else None
        if path is None:
            return cls(task.name)
        if path.parent.parent == BUILTIN_TASKS_DIR.resolve():  # every node has the built-in tasks
            return cls(path.parent.name)
        return cls(str(path), path.read_text())

    def load(self, scratch: Path) -> Task:
        if self.text is None:
            return load_task(self.spec)
        return load_task(str(_same_or_copy(self.spec, self.text, scratch / "tasks")))


def _same_or_copy(path: str, text: str, folder: Path) -> Path:
    """``path`` when this node has that file with that text (one machine, a shared file system: files
    beside it stay reachable), else a copy of the text under ``folder``."""
    try:
        if Path(path).read_text() == text:
            return Path(path)
    except (OSError, UnicodeDecodeError):
        pass
    target = folder / hashlib.sha256(text.encode()).hexdigest()[:16] / Path(path).name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.write_text(text)
    return target


class Evaluator:
    """One evaluation slot of the cluster: a GPU (or a CPU) and a warm judge beside it. A Ray actor."""

    def __init__(self, device: str, task: TaskRef):
        from ratchet.judge.device_lock import DeviceLock

        self.device = device
        self.scratch = Path(tempfile.mkdtemp(prefix="ratchet-ray-"))
        self.task = task.load(self.scratch)
        self.lock = DeviceLock() if device == "cuda" else None
        self.device_name = _device_name(device)

    def describe(self) -> dict:
        import ray

        context = ray.get_runtime_context()
        return {"node": socket.gethostname(), "node_id": context.get_node_id(), "pid": os.getpid(),
                "device_name": self.device_name, "judge": judge_fingerprint(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def judge(self, candidate: Candidate, config: dict, race_bars: Mapping[str, RaceBar]) -> dict:
        from ratchet.judge import JudgeOptions, evaluate

        here = replace(candidate, path=str(_same_or_copy(candidate.path, candidate.source, self.scratch / "candidates")))
        options = JudgeOptions(device=self.device, device_lock=self.lock, race=race_bars.get(self.device_name))
        verdict = evaluate(self.task, here, config, options).to_json(with_times=True)
        verdict["candidate"] = candidate.path  # the driver's name for it, not this node's copy
        verdict["placement"] = {**self.describe(), "executor": "ray"}
        verdict["placement"].pop("judge")
        return verdict


def _device_name(device: str) -> str:
    from ratchet.hardware.ceilings import device_identity

    return device_identity(device)[0]  # on a GPU actor Ray shows it only its own GPU: the current one


@dataclass
class RaySlot:
    """One actor as the loop sees it, with what it said about itself at its last start."""

    index: int
    actor: Any
    info: dict
    running: int = 0


class RayExecutor:
    """The loop's executor on a Ray cluster (see the module's docstring)."""

    name = "ray"

    def __init__(self, task: Task, device: str, settings: RaySettings = RaySettings()):
        self.ray = require_ray()
        self.device, self.settings = device, settings
        connect(settings)
        resources = self.ray.cluster_resources()
        if device == "cuda":
            count = int(resources.get("GPU", 0))
            if count < 1:
                raise ExecutorError(f"the Ray cluster has no GPU (resources: {_resources(resources)}); "
                                    "start its GPU nodes with 'ray start', or use --device cpu")
            options = {"num_gpus": 1, "num_cpus": 1, "max_concurrency": 1 + LOOKAHEAD}
        else:
            count = max(1, int(resources.get("CPU", 1)))
            options = {"num_cpus": 1, "max_concurrency": 1}
        remote = self.ray.remote(**options, max_restarts=-1, max_task_retries=0)(Evaluator)
        ref = TaskRef.of(task)
        actors = [remote.remote(device, ref) for _ in range(count)]
        self.slots = [RaySlot(i, actor, {}) for i, actor in enumerate(actors)]
        self.pipeline = count * options["max_concurrency"]
        self._lock = threading.Lock()
        self._start_check()

    def _start_check(self) -> None:
        ray = self.ray
        try:
            infos = ray.get([s.actor.describe.remote() for s in self.slots], timeout=self.settings.startup_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ExecutorError(f"{len(self.slots)} Ray actors did not start within {self.settings.startup_s:.0f} s "
                                "(busy GPUs? nodes without Ratchet's dependencies?)") from None
        except ray.exceptions.RayError as exc:
            self.close()
            raise ExecutorError(f"a Ray actor could not start the judge: {_last_line(exc)}") from None
        mine = judge_fingerprint()
        for slot, info in zip(self.slots, infos):
            slot.info = info
            if info["judge"] != mine:
                self.close()
                raise ExecutorError(f"the judge on {info['node']} differs from this one (judge sources "
                                    f"{info['judge'][:12]} there, {mine[:12]} here): run one Ratchet everywhere")

    @property
    def device_names(self) -> str:
        """The kinds of device the cluster's actors judge on, e.g. ``NVIDIA H200`` or ``NVIDIA H100, NVIDIA H200``."""
        return ", ".join(sorted({s.info.get("device_name", "?") for s in self.slots}))

    # -- one evaluation ------------------------------------------------------------------------------
    def judge(self, task: Task, candidate: Candidate, config: dict, slot: RaySlot,
              race_bars: Mapping[str, RaceBar]) -> dict:
        started = time.monotonic()
        losses: list[str] = []
        tried = slot
        for attempt in range(1 + self.settings.retries):
            if attempt:
                tried = self._elsewhere(tried)
            try:
                verdict = self._call(tried, candidate, config, race_bars)
            except _Lost as lost:
                losses.append(f"{_where(tried)}: {lost}")
                continue
            if losses:
                verdict["placement"]["retried_after"] = losses
            return verdict
        return lost_verdict(self.device, losses, time.monotonic() - started, tried.info)

    def _call(self, slot: RaySlot, candidate: Candidate, config: dict, race_bars) -> dict:
        ray = self.ray
        with self._lock:
            slot.running += 1
        try:
            ref = slot.actor.judge.remote(candidate, dict(config), dict(race_bars))
            try:
                verdict = ray.get(ref, timeout=self.settings.evaluation_s)
                slot.info.update(verdict.get("placement", {}))  # after a restart: its new pid, maybe node
                return verdict
            except ray.exceptions.RayTaskError as exc:  # the harness raised on the actor: not a loss
                return harness_error(self.device, f"{_where(slot)}: {_last_line(exc)}", slot.info)
            except ray.exceptions.GetTimeoutError:
                try:
                    ray.cancel(ref)
                except Exception:  # the actor is gone with it: nothing to cancel
                    pass
                raise _Lost(f"no answer within {self.settings.evaluation_s:.0f} s") from None
            except ray.exceptions.RayError as exc:  # the actor died, its node went, its object was lost
                raise _Lost(f"{type(exc).__name__}: {_last_line(exc)}") from None
        finally:
            with self._lock:
                slot.running -= 1

    def _elsewhere(self, lost: RaySlot) -> RaySlot:
        """Another actor for a retry: on another node where one has an actor, the least busy first; the
        same actor (restarted by Ray) only when it is the only one."""
        others = [s for s in self.slots if s is not lost] or [lost]
        node = lost.info.get("node_id")
        with self._lock:
            return min(others, key=lambda s: (s.info.get("node_id") == node, s.running))

    def close(self) -> None:
        for slot in self.slots:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # gone already, or Ray itself is gone: nothing left to end
                pass


class _Lost(Exception):
    """The evaluation's actor (its process or its node) was lost while judging it."""


def lost_verdict(device: str, losses: list[str], wall_s: float, placement: dict) -> dict:
    """The attempt of an evaluation lost twice: an ``error`` with reason ``lost`` and both failures."""
    detail = f"lost {len(losses)} time(s): " + "; ".join(losses)
    return {"verdict": "error", "reasons": [{"code": "lost", "detail": detail[:2000]}], "speedup": None,
            "shapes": [], "judge_wall_s": round(wall_s, 3), "device": device, "device_name": "",
            "placement": {**_public(placement), "executor": "ray", "lost": losses}}


def harness_error(device: str, detail: str, info: dict) -> dict:
    return {"verdict": "error", "reasons": [{"code": "worker_error", "detail": detail[:2000]}], "speedup": None,
            "shapes": [], "judge_wall_s": 0.0, "device": device, "device_name": "",
            "placement": {**_public(info), "executor": "ray"}}


def _public(info: dict) -> dict:
    return {k: v for k, v in info.items() if k != "judge"}


def _where(slot: RaySlot) -> str:
    info = slot.info
    return f"actor {slot.index} (pid {info.get('pid', '?')} on {info.get('node', '?')})"


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


def _resources(resources: Mapping[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if k in ("CPU", "GPU", "memory")}
    return ", ".join(f"{k} {v:g}" for k, v in shown.items()) or "none"
