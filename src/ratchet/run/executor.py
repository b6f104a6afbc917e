"""Where a run's evaluations happen: on this machine (``local``) or on a Ray cluster (``ray``).

An executor gives the loop its slots (where one evaluation at a time may start), how many evaluations
may be in flight at once, and ``judge`` (one evaluation, its verdict as JSON with times). The proposers,
the keep rule and the ledger never leave the driver: only a candidate's source, its config and the
run's race bars go out, and only a verdict comes back.

``local`` is the judge on this machine's GPUs (one JudgeOptions with its device lock per GPU) or its
CPU; ``ray`` is ``ratchet.run.ray_executor``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol

from ratchet.candidate import Candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.race import RaceBar
from ratchet.task import Task

EXECUTORS = ("local", "ray")


class ExecutorError(Exception):
    """The executor cannot start as asked (Ray missing, a cluster unreachable or without GPUs); one line."""


@dataclass(frozen=True)
class ExecutorChoice:
    """What ``--executor`` and ``--address`` asked for; stored in a run's options so ``--resume`` reuses it."""

    kind: str = "local"
    address: str | None = None  # with kind "ray": the cluster (ray.init's address); None: Ray's default

    def __post_init__(self):
        if self.kind not in EXECUTORS:
            raise ExecutorError(f"unknown executor {self.kind!r} (one of {', '.join(EXECUTORS)})")
        if self.address and self.kind != "ray":
            raise ExecutorError("--address goes with --executor ray")

    def to_options(self) -> dict:
        return {"executor": self.kind, **({"address": self.address} if self.address else {})}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "ExecutorChoice":
        return cls(options.get("executor", "local"), options.get("address"))


class Executor(Protocol):
    name: str
    slots: list  # what judge() is given; the loop sends each evaluation to the slot with the fewest running
    pipeline: int  # evaluations in flight at most, over all slots

    def judge(self, task: Task, candidate: Candidate, config: dict, slot: Any,
              race_bars: Mapping[str, RaceBar]) -> dict: ...

    def close(self) -> None: ...


# Evaluations in flight per GPU beyond the one being timed (the loop's pipeline; see run/loop.py).
LOOKAHEAD = 2


def _locked(judge_options: list[JudgeOptions]) -> list[JudgeOptions]:
    """The GPU slots, each with the device lock of its GPU. Evaluations in flight together are timed alone
    only through that lock, so a caller that gave none (a library user, a benchmark) gets one per GPU
    index: without it, on 2026-12-04 on the H200, six rmsnorm evaluations in flight timed over each
    other's checks and an honest kernel failed clock_mismatch."""
    from ratchet.judge.device_lock import DeviceLock

    locks: dict[int, Any] = {o.gpu_index: o.device_lock for o in judge_options if o.device_lock is not None}
    slots = []
    for options in judge_options:
        if options.device == "cuda" and options.device_lock is None:
            options = replace(options, device_lock=locks.setdefault(options.gpu_index, DeviceLock()))
        slots.append(options)
    return slots


class LocalExecutor:
    """The judge on this machine: one slot per GPU (their device locks shared by the evaluations on it),
    or one CPU slot judging one evaluation at a time (checks beside a timing would disturb it)."""

    name = "local"

    def __init__(self, judge_options: list[JudgeOptions], lookahead: int = LOOKAHEAD):
        self.slots = _locked(judge_options)
        cuda = self.slots[0].device == "cuda"
        self.pipeline = len(self.slots) * (1 + lookahead) if cuda else 1
        self._names: dict[int, str] = {}

    def judge(self, task: Task, candidate: Candidate, config: dict, slot: JudgeOptions,
              race_bars: Mapping[str, RaceBar]) -> dict:
        if slot.race is None and race_bars:  # the best timed on this kind of device, when it starts
            slot = replace(slot, race=race_bars.get(self._device_name(slot)))
        return evaluate(task, candidate, config, slot).to_json(with_times=True)

    def _device_name(self, options: JudgeOptions) -> str:
        key = id(options)
        if key not in self._names:
            self._names[key] = local_device_name(options.device, options.gpu_index)
        return self._names[key]

    def close(self) -> None:
        pass


def local_device_name(device: str, gpu_index: int | None = None) -> str:
    """The name the judge gives this machine's device in a verdict (``device_name``)."""
    from ratchet.hardware.ceilings import device_identity

    if device == "cuda" and gpu_index is not None:
        import torch

        return torch.cuda.get_device_name(gpu_index)
    return device_identity(device)[0]


def make_executor(choice: ExecutorChoice, task: Task, device: str, judge_options: list[JudgeOptions]) -> Executor:
    """The executor ``choice`` names; ``judge_options`` are the local GPUs' (or the CPU's)."""
    if choice.kind == "local":
        return LocalExecutor(judge_options)
    from ratchet.run.ray_executor import RayExecutor, RaySettings

    return RayExecutor(task, device, RaySettings(address=choice.address))
