"""The judge's answer: a verdict, its reasons (named codes), and one row per shape judged.

Units are in field names. ``Verdict.to_json()`` is the schema of ``ratchet eval --json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, ERROR = "pass", "fail", "error"

# Every reason the judge can give. A `fail` reason means the candidate is wrong or cheating; an
# `error` reason means it could not be judged. Tests and the red-team corpus refer to these names.
FAIL_CODES = {
    "wrong_output": "an output differs from the reference beyond the dtype's tolerance",
    "wrong_type": "the kernel returned something other than the reference's structure of tensors",
    "wrong_dtype": "an output has the wrong dtype",
    "wrong_shape": "an output has the wrong shape",
    "wrong_device": "an output is on the wrong device",
    "nan_inf": "an output holds NaN or Inf where the reference has none",
    "not_dense": "an output is a tensor subclass, a view without its own storage, or not contiguous-dense",
    "input_mutated": "the kernel changed its inputs",
    "unwritten_output": "an output holds the poison the judge wrote into free memory",
    "timed_output_wrong": "an output of a timed call is wrong (caching, or work done only when checked)",
    "deferred_write": "an output changed after the kernel returned (work left running on a stream or thread)",
    "clock_mismatch": "the outside wall clock saw far more time than the kernel's timers reported",
    "timer_tampered": "a timing or synchronisation primitive was replaced inside the worker",
    "background_thread": "the kernel left threads running after it returned",
    "child_process": "the kernel started processes",
    "precision_flags": "the kernel enabled TF32 or reduced-precision reductions the task forbids",
    "forbidden_call": "the kernel ran the library op the task is about",
    "beyond_roofline": "a time below what the device's measured ceilings allow",
    "statistical": "sampled outputs do not follow the task's distribution",
    "shape_unsupported": "the kernel raised on a shape other than the first (held-out or odd shape)",
    "forged_result": "a message on the result channel did not come from the harness",
    "harness_tampered": "the kernel replaced the judge's harness code or reaches into it",
    "box_violation": "the candidate wrote outside its scratch folder, opened a network socket or signalled "
                     "outside its box, and the box refused it",
}
ERROR_CODES = {
    "import_error": "the candidate file failed to import",
    "missing_kernel": "the candidate defines no usable kernel",
    "bad_signature": "kernel(...) does not accept the task's arguments or the config's keywords",
    "compile_error": "the kernel failed to compile",
    "kernel_exception": "the kernel raised on the first shape",
    "crash": "the worker process died (segfault, exit, abort)",
    "timeout": "the worker exceeded a time limit",
    "out_of_memory": "the worker exceeded its memory limit",
    "worker_error": "the harness failed for a reason not attributable to the candidate",
    "reference_error": "the reference failed; the task is broken",
    "device_unavailable": "the requested device is not present",
    "box_unavailable": "this machine cannot box candidate code (no Landlock) and the user did not opt out",
    "bad_input": "the task, candidate file or flags are unusable (usage error)",
    "no_code": "a model's answer held no usable candidate file (no code defining kernel, or the call failed)",
    # Given by the run (never by an evaluation): the judge's process was lost with its cluster worker or
    # node (run/ray_executor.py), and so was its one retry elsewhere.
    "lost": "the evaluation was lost with its worker or node, twice (a cluster fault, not the candidate's)",
}


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str

    def __post_init__(self):
        if self.code not in FAIL_CODES and self.code not in ERROR_CODES:
            raise ValueError(f"unknown reason code {self.code!r}")


@dataclass
class ShapeResult:
    """One shape and dtype judged. Times are medians over the timed calls, in microseconds."""

    shape: dict[str, int]
    dtype: str
    held_out: bool = False
    correct: bool = True
    mode: str | None = None  # "eager" or "graph": the mode of median_us and speedup
    median_us: float | None = None
    iqr_us: float | None = None
    reps: int | None = None
    rse: float | None = None
    ref_median_us: float | None = None
    ref_iqr_us: float | None = None
    speedup: float | None = None
    eager_median_us: float | None = None
    graph_median_us: float | None = None
    ref_graph_median_us: float | None = None
    floor_us: float | None = None
    achieved_tbps: float | None = None
    achieved_tflops: float | None = None
    roofline_fraction: float | None = None
    weight: float = 1.0
    times_us: list[float] = field(default_factory=list, repr=False)
    ref_times_us: list[float] = field(default_factory=list, repr=False)


@dataclass
class Verdict:
    verdict: str
    reasons: list[Reason] = field(default_factory=list)
    speedup: float | None = None
    shapes: list[ShapeResult] = field(default_factory=list)
    task: str = ""
    candidate: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    device_name: str = ""
    # What judged it: torch, triton and CUDA versions of the judging process (a kernel's behaviour can
    # change with them, and an agent with no GPU cannot see them otherwise)
    software: dict[str, str] = field(default_factory=dict)
    judge_wall_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)  # start, correctness, timing
    # Where a slow evaluation's time went: the judging thread's own CPU seconds ("cpu"; the loop judges in
    # threads of one process, which share one interpreter lock), its seconds waiting for the device lock
    # ("gpu_wait"), the correctness phase's wall time by part ("first_call", "calls", "checks"), and the
    # first call's launch by the worker's clock ("first_launch", or "first_profiled" under the profiler).
    judge_host_s: dict[str, float] = field(default_factory=dict)
    # The timed calls: how many, and the mean host us per call of each part (judge.timing.CallCosts)
    timed_calls: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, float] = field(default_factory=dict)  # the roofline's: copy_tbps, matmul_tflops
    notes: list[str] = field(default_factory=list)
    # Timing stopped early at a shape where the candidate was beyond the run's race bar (judge.race):
    # the verdict stands (pass), the times are partial, and the keep rule never keeps it. ``race`` says
    # where: shape, dtype, mode, batches, slower (x the best), threshold, p_value, best_seq.
    raced: bool = False
    race: dict[str, Any] = field(default_factory=dict)

    def to_json(self, with_times: bool = False) -> dict[str, Any]:
        data = asdict(self)
        for row in data["shapes"]:
            if not with_times:
                row.pop("times_us")
                row.pop("ref_times_us")
        return data

    @property
    def exit_code(self) -> int:
        return {PASS: 0, FAIL: 1}.get(self.verdict, 2)


def verdict_from_reasons(reasons: list[Reason]) -> str:
    """Any fail reason makes the verdict fail; else any error reason makes it error; else pass."""
    if any(r.code in FAIL_CODES for r in reasons):
        return FAIL
    if reasons:
        return ERROR
    return PASS
