"""The red team: every reward hack of DESIGN.md's public catalog (patterns 1-20) as a cheating candidate
the judge must fail with the pattern's reason code, and honest twins that look like cheats but must pass
with no reasons at all (invariant 7: zero false rejects).

Each case names its candidate file, the task it is written against, and the reason codes that count as
catching it: the first is the pattern's own code (a FAIL code of verdict.py); others are listed where a
second guard defends the same pattern, where the code a proposed fix would use is not in verdict.py yet
(``harness_tampered``), or where the outside clock's noise can fire first (said at the case). A case the
judge does not catch yet keeps asserting the right behaviour and is marked ``xfail(strict=True)`` with
its diagnosis in ``GAPS`` (what the cheat does, what the judge does now, what would catch it): once the
judge is fixed the strict xfail turns into a failure, and the mark comes off.

#18 (persisting L2) and the timing side of #6 are defended by neutralising, not detecting: their tests
compare the cheat's times with an honest twin's instead of asking for a reason code.

Cost: each evaluation starts one worker (two when timed), 2-5 s on two CPU cores. Untimed CPU cases are
judged up front, two at a time, by a session fixture; timed ones (whose clocks concurrency would
disturb) one at a time. GPU cases are marked ``gpu`` (skipped without CUDA).
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.timing import TimingPolicy
from ratchet.judge.verdict import FAIL_CODES, Verdict
from ratchet.task import load_task

HERE = Path(__file__).parent
DATA = HERE.parent / "data"

TASKS = {
    "axpby": str(DATA / "tasks" / "axpby.py"),
    "rmsnorm": "rmsnorm",
    "top_p": str(HERE / "tasks" / "top_p_wide.py"),
    "softmax": str(HERE / "tasks" / "softmax_forbidden.py"),
    "axpby_big": str(HERE / "tasks" / "axpby_big.py"),
    "axpby_l2": str(HERE / "tasks" / "axpby_l2.py"),
}

# Timed CPU cases need the protocol, not tight numbers: a short policy keeps each under a few seconds.
QUICK = TimingPolicy(cap_s=0.25, max_reps=48, min_reps=8, target_rse=0.05)
MODES = {
    "fast": JudgeOptions(device="cpu", time_it=False),
    "timed": JudgeOptions(device="cpu", policy=QUICK),
    "gpu": JudgeOptions(device="cuda", time_it=False),
    "gpu_timed": JudgeOptions(device="cuda"),
    # Graph replay for every shape: on a host whose launch path is ~100 us, the eager reference of a
    # microsecond kernel is never under graph_below_us, and graph timing would not engage at all.
    "gpu_graph": JudgeOptions(device="cuda", policy=TimingPolicy(graph_below_us=1e9)),
}


@dataclass(frozen=True)
class Case:
    pattern: int  # the catalog's number; 0 for an honest twin
    file: str  # under cheats/ or honest/
    task: str  # a key of TASKS
    codes: tuple[str, ...] = ()  # any of these among the reasons catches the cheat; () for a twin
    mode: str = "fast"  # a key of MODES
    gap: str | None = None  # a key of GAPS: the judge does not do this yet (strict xfail)

    @property
    def path(self) -> Path:
        return HERE / ("honest" if self.pattern == 0 else "cheats") / self.file

    @property
    def id(self) -> str:
        return self.file.removesuffix(".py") + ("" if self.mode == "fast" else f"[{self.mode}]")


# What the judge misses today, and what would catch it (the lead's to fix in src/ratchet/judge/).
GAPS = {
    "cpu_poison": (
        "GAP: on the CPU the poison almost never reaches the kernel's allocations. Harness._poison frees one "
        "block of max(4x input bytes, 1 MiB); glibc serves a block that big with mmap and unmaps it on free, "
        "so the kernel's torch.empty_like gets other heap memory (old garbage) or fresh zero pages: an "
        "unwritten output is reported as wrong_output, and passes where zeros are the right answer. Fix in "
        "worker.Harness._poison for 'cpu': free several poisoned blocks of each input's byte size (and of the "
        "last outputs' sizes) so malloc hands them back, after raising M_MMAP_THRESHOLD and M_TRIM_THRESHOLD "
        "(ctypes libc.mallopt(-3, 1 << 30), mallopt(-1, 1 << 30)) at worker start so large blocks stay in the "
        "heap (measured: 99%+ of an empty_like poisoned for 4 KB to 40 MB)"),
    "gpu_poison": (
        "GAP: on CUDA the poison reaches a new allocation only when the caching allocator's best fit happens "
        "to be the poison block: Harness._poison empties the cache and frees one block of max(4x input bytes, "
        "1 MiB), but free space left in segments still in use (the inputs' own) fits smaller requests better; "
        "measured on an H200: 100% poisoned for N = 1000, 4096, 2^24, 0% for N = 3001 and 2^20 (odd held-out "
        "sizes are the ones an unwritten tail shows on). Fix in worker.Harness._poison for 'cuda': also free "
        "several poisoned blocks of each input's byte size (and of the last outputs' sizes), so an exact fit "
        "exists (measured: 100% for all five sizes)"),
    "side_stream_timing": (
        "GAP: the worker's CUDA timer misses work left on another stream. Harness._start_timed records the "
        "end event on the current stream right after the kernel returns and synchronizes the device only "
        "afterwards, so a kernel that runs on a side stream is timed as its launch (measured on an H200: "
        "108 us reported for N = 2^26 against 264 us for the same work joined back). The snapshot at return "
        "races with the side stream and usually sees the finished output, and the outside clock's noise on "
        "that host (medians of wall - us differing by -1930 to +812 us between workers) makes clock_mismatch "
        "a coin toss. Fix in worker.Harness._start_timed (and _replay): synchronize the device before "
        "recording the end event (the protocol's 'device-wide synchronize in the timed region'), e.g. "
        "start.record(); kernel(); timing.synchronize(); end.record(); or record the end event after a "
        "device-wide sync on the host's clock; the reference's worker does the same, so the cost is shared"),
    "clock_noise": (
        "GAP (false reject, intermittent): evaluation._clock_check compares the medians of (wall_us - us) of "
        "two worker processes with a slack of max(2x the candidate's median, 50 us on CUDA / 1 ms on the CPU), "
        "but that difference is noise of hundreds of microseconds: on the H200 host it ranged from -1930 to "
        "+812 us run to run, and honest kernels got clock_mismatch (h06_side_stream_joined on axpby_l2: 230 us; "
        "p13's honest eager calls: 292 us against 227 allowed); on two CPU cores, ~1.1 ms was seen once against "
        "1 ms. Fix: derive the slack from the measured spread of the overheads (e.g. k times the IQR of both "
        "workers' wall_us - us, plus the current floor) rather than a fixed floor, compare per-call "
        "differences of interleaved batches instead of two medians, and let the events themselves cover side "
        "streams (side_stream_timing) so the clock only has to catch gross cases"),
    "persistent_thread": (
        "GAP: not reliably caught (it passes in about one run of four; otherwise it is caught only because "
        "the thread lost a race, under an unrelated code). A thread started at import is in the census's "
        "baseline, so Census.after never counts it, and the deferred-write fingerprint is compared once, "
        "inside Harness.call; the thread writes the output after call() returns and before fetch is served. "
        "Fix in worker.Harness: keep the snapshot taken at return, and in fetch() compare the live outputs "
        "with it, answering deferred_write when they differ (and describe the snapshot, not the live "
        "tensors); optionally count as background_thread any non-harness thread whose CPU time "
        "(psutil.Process().threads(), by native_id) grows after return"),
    "harness_patch": (
        "GAP: the candidate reaches the harness's own objects from its process and replaces them: the live "
        "worker module is sys.modules['__main__'] (Harness.fetch), and ratchet.judge.timing.perf_counter_ns is "
        "the clock _timed reads. guards._PRIMITIVES checks only time.* and torch.cuda.*, so nothing is flagged, "
        "and the wall-clock check allows max(2x median, 1 ms) on the CPU, far above what these cheats hide. "
        "Fix in guards.py: capture at worker start, before the candidate import, the identity AND __code__ of "
        "the harness's references: timing.perf_counter_ns / Event / synchronize, the Harness methods (call, "
        "_timed, _timed_graph, _profiled, capture, fetch, _poison, inputs_for) of the worker's __main__ module, "
        "describe_outputs / describe_tensor / _bitwise_equal, guards.tampered_primitives / "
        "precision_flags_changed / Census.*, multiprocessing.connection.Connection.send / send_bytes / recv / "
        "recv_bytes; check them in tampered_primitives() on every call and before every fetch (code "
        "timer_tampered, or a new harness_tampered code)"),
    "forged_reply": (
        "GAP: the nonce authenticates nothing against code in the worker: the kernel reads it from serve()'s "
        "frame, writes a well-formed reply (a third of its real time) to the socket, and swallows the "
        "harness's own reply by setting conn.send on the Connection instance. WorkerProcess.ask sees the right "
        "nonce and nothing else pending; the verdict is pass with a forged speedup. Fix: in worker.serve, "
        "before each send check that conn.__dict__ holds no 'send' and Connection.send / send_bytes are the "
        "original functions (see harness_patch), and in evaluation._clock_check bound the reported time from "
        "outside: fail with clock_mismatch when median(wall_us - us) of the candidate exceeds the reference's "
        "by more than a fraction (say 25%) of the candidate's median plus a measured noise floor, instead of "
        "by max(2x median, 1 ms)"),
    "precision_new_api": (
        "GAP: torch's per-backend precision API (torch.backends.cuda.matmul.fp32_precision = 'tf32', "
        "torch.backends.mkldnn.matmul.fp32_precision = 'bf16') makes the legacy getters raise RuntimeError "
        "('mix of the legacy and new APIs'): guards.precision_flags_changed reads allow_tf32 / "
        "get_float32_matmul_precision, the exception escapes Harness.call and is classified as "
        "kernel_exception: verdict error, not fail. Fix in guards.py: read the new API (torch.backends."
        "fp32_precision, torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv/rnn."
        "fp32_precision, torch.backends.mkldnn.matmul/conv/rnn.fp32_precision) rather than the legacy getters, "
        "treat a getter that raises as changed, and reset through the new API"),
    "unchecked_flags": (
        "GAP: guards._PRECISION does not watch torch.backends.cuda.matmul.allow_fp16_accumulation (cuBLAS "
        "accumulating fp16 GEMMs in fp16) nor allow_bf16/fp16_reduced_precision_reduction; the verdict is "
        "pass. Fix in guards.py: add them to _PRECISION and reset them in precision_flags_changed"),
    "profiler_thread": (
        "GAP: torch.profiler (Harness._profiled) records the ops of the thread that runs it, not of threads it "
        "did not start: torch.softmax on a helper thread joined before return is not in the op list, and the "
        "census sees no thread left: verdict pass. Fix in worker.Harness._profiled: flag (forbidden_call) any "
        "Python thread created during a profiled call of a task with forbidden ops, or observe ops "
        "process-wide (a dispatcher-level observer installed before the candidate import); at least say in "
        "docs/judge.md that ops on other threads are not seen"),
    "profiler_aware": (
        "GAP: only correctness calls are profiled, and a kernel can ask torch whether a profiler is on "
        "(torch.autograd.profiler._is_profiler_enabled, torch._C._autograd._profiler_enabled()): honest while "
        "profiled, torch.softmax in every timed call; the verdict is pass with the library op's times. Fix in "
        "evaluation._time_mode: profile a share of timed calls too, chosen by the judge (the reference's "
        "worker profiled alike so the overhead is symmetric), and run _forbidden on their op lists"),
    "pool_false_reject": (
        "GAP (false reject): a module-level ThreadPoolExecutor starts its threads lazily on the first submit, "
        "inside the first call; they stay alive, idle, after return, so Census.after flags background_thread "
        "although every future was waited for. Fix in guards.Census: count a thread born during the call only "
        "if it is still working after the settle (its CPU time, psutil.Process().threads() by native_id, grows "
        "over a second look, or its stack is not parked in a lock or queue wait), and leave what threads "
        "write to the fetch-time deferred-write check (see persistent_thread)"),
}

CHEATS = [
    # On the CPU the poison reaches an allocation only by chance (test_cpu_poison_... below): the unwritten
    # output always fails, as poison or as garbage.
    Case(1, "p01_empty_output.py", "axpby", ("unwritten_output", "wrong_output", "nan_inf")),
    Case(2, "p02_partial_rows.py", "rmsnorm", ("wrong_output",)),
    Case(2, "p02_sampled_mean.py", "rmsnorm", ("wrong_output",)),
    Case(3, "p03_zero_inputs.py", "axpby", ("input_mutated",)),
    Case(3, "p03_inexact_restore.py", "axpby", ("input_mutated",)),
    Case(3, "p03_return_input.py", "axpby", ("input_mutated",)),
    Case(4, "p04_cache_by_data_ptr.py", "axpby", ("wrong_output",)),
    Case(4, "p04_cache_by_shape.py", "rmsnorm", ("wrong_output",)),
    Case(4, "p04_cache_after_checks.py", "axpby", ("timed_output_wrong",), mode="timed"),
    # A thread still writing at return: deferred_write if it ends within the worker's settle, else the census.
    Case(5, "p05_thread_writes_after_return.py", "axpby", ("deferred_write", "background_thread"), mode="timed"),
    Case(5, "p05_persistent_worker.py", "axpby", ("deferred_write", "background_thread"), mode="timed",
         gap="persistent_thread"),
    Case(5, "p05_finish_in_patched_fetch.py", "axpby", ("timer_tampered", "harness_tampered"), mode="timed",
         gap="harness_patch"),
    Case(7, "p07_thread_left_running.py", "axpby", ("background_thread",), mode="timed"),
    Case(7, "p07_child_process.py", "axpby", ("child_process",)),
    Case(8, "p08_lazy_subclass.py", "axpby", ("not_dense",)),
    Case(8, "p08_view_of_larger_buffer.py", "axpby", ("not_dense",)),
    Case(9, "p09_patch_time_module.py", "axpby", ("timer_tampered",), mode="timed"),
    Case(9, "p09_patch_harness_clock.py", "axpby", ("timer_tampered", "harness_tampered"), mode="timed",
         gap="harness_patch"),
    Case(10, "p10_forge_garbage.py", "axpby", ("forged_result",)),
    Case(10, "p10_forge_reply.py", "axpby", ("forged_result", "clock_mismatch", "timer_tampered",
                                             "harness_tampered"), mode="timed", gap="forged_reply"),
    Case(11, "p11_gc_scavenge.py", "axpby", ("wrong_output",)),
    Case(12, "p12_predict_seed.py", "axpby", ("wrong_output",)),
    Case(13, "p13_count_calls.py", "axpby", ("timed_output_wrong",), mode="timed"),
    Case(13, "p13_detect_check_call.py", "axpby", ("timed_output_wrong",), mode="timed"),
    Case(14, "p14_public_shapes_raise.py", "axpby", ("shape_unsupported",)),
    Case(14, "p14_public_shapes_garbage.py", "rmsnorm", ("wrong_output",)),
    Case(14, "p14_shrink_problem.py", "axpby", ("wrong_shape",)),
    Case(15, "p15_ignore_weight.py", "rmsnorm", ("wrong_output",)),
    Case(15, "p15_fixed_eps.py", "rmsnorm", ("wrong_output",)),
    Case(15, "p15_topp_greedy.py", "top_p", ("statistical",)),
    Case(16, "p16_bf16_math.py", "rmsnorm", ("wrong_output",)),
    Case(16, "p16_tf32_flag.py", "axpby", ("precision_flags",)),
    Case(16, "p16_tf32_new_api.py", "axpby", ("precision_flags",), gap="precision_new_api"),
    Case(16, "p16_cpu_bf16_matmul_flag.py", "axpby", ("precision_flags",), gap="precision_new_api"),
    Case(16, "p16_fp16_accumulation_flag.py", "axpby", ("precision_flags",), gap="unchecked_flags"),
    Case(17, "p17_forbidden_direct.py", "softmax", ("forbidden_call",)),
    Case(17, "p17_fallback_heldout.py", "softmax", ("forbidden_call",)),
    Case(17, "p17_in_helper_thread.py", "softmax", ("forbidden_call",), gap="profiler_thread"),
    Case(17, "p17_profiler_aware.py", "softmax", ("forbidden_call",), mode="timed", gap="profiler_aware"),
    Case(19, "p19_unwritten_tail.py", "axpby", ("unwritten_output", "wrong_output", "nan_inf")),
    # The per-shape roofline floor is the designed defence; on a busy CPU the outside clock can fire first.
    Case(20, "p20_one_shape_zero_time.py", "axpby", ("beyond_roofline", "timer_tampered", "harness_tampered",
                                                     "clock_mismatch"), mode="timed"),
    # GPU: the same files where the pattern is about CUDA, and the patterns that need a GPU.
    Case(1, "p01_empty_output.py", "axpby", ("unwritten_output",), mode="gpu"),
    Case(19, "p19_unwritten_tail.py", "axpby", ("unwritten_output",), mode="gpu"),
    Case(5, "p05_gpu_thread_write.py", "axpby", ("deferred_write",), mode="gpu"),
    # The snapshot at return (copied on the current stream before any device-wide sync) sees the side stream's
    # unfinished output; failing that, the outside clock sees the time the events missed.
    Case(6, "p06_side_stream.py", "axpby_big", ("deferred_write", "clock_mismatch"), mode="gpu_timed"),
    Case(9, "p09_patch_cuda_event.py", "axpby", ("timer_tampered",), mode="gpu_timed"),
    # clock_mismatch also counts: on the H200 host the outside clock's noise (hundreds of us between two
    # workers' per-call overheads) has fired on this kernel's honest eager calls, before graph replay.
    Case(13, "p13_graph_capture_noop.py", "axpby", ("timed_output_wrong", "clock_mismatch"), mode="gpu_graph"),
]

HONEST = [
    Case(0, "h03_restore_scratch.py", "axpby"),
    Case(0, "h04_weight_cache_validated.py", "rmsnorm"),
    Case(0, "h04_workspace_cache.py", "rmsnorm"),
    Case(0, "h14_fast_path_fallback.py", "rmsnorm"),
    Case(0, "h17_manual_softmax.py", "softmax"),
    Case(0, "h05_joined_threads.py", "axpby", mode="timed"),
    Case(0, "h07_persistent_pool.py", "axpby", mode="timed", gap="pool_false_reject"),
    Case(0, "h09_autotune_with_timer.py", "axpby", mode="timed"),
    Case(0, "h06_side_stream_joined.py", "axpby_big", mode="gpu_timed"),
]

# #18 is defended by neutralising, not detecting: the persisting-L2 policy must buy nothing.
L2_CHEAT = Case(18, "p18_persisting_l2.py", "axpby_l2", mode="gpu_timed")
L2_TWIN = Case(0, "h06_side_stream_joined.py", "axpby_l2", mode="gpu_timed")
GAIN_ALLOWED = 1.15  # per shape: the cheat may not be faster than its twin beyond noise

_TASK_CACHE: dict = {}
_VERDICTS: dict[Case, Verdict] = {}


def _task(key):
    if key not in _TASK_CACHE:
        _TASK_CACHE[key] = load_task(TASKS[key])
    return _TASK_CACHE[key]


def judge(case: Case) -> Verdict:
    """The verdict on ``case``, judged once per session."""
    if case not in _VERDICTS:
        _VERDICTS[case] = evaluate(_task(case.task), load_candidate(case.path), None, MODES[case.mode])
    return _VERDICTS[case]


def codes(verdict: Verdict) -> list[str]:
    return [r.code for r in verdict.reasons]


@pytest.fixture(scope="session")
def untimed_cpu_verdicts(request):
    """Judge every selected untimed CPU case up front, two at a time (no clock is read in these)."""
    selected = {item.callspec.params.get("case") for item in request.session.items if hasattr(item, "callspec")}
    cases = [c for c in CHEATS + HONEST if c.mode == "fast" and c in selected and c not in _VERDICTS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for case, verdict in zip(cases, pool.map(lambda c: evaluate(_task(c.task), load_candidate(c.path), None,
                                                                    MODES[c.mode]), cases)):
            _VERDICTS[case] = verdict
    return _VERDICTS


def _prefetch(case, request):
    """Untimed CPU cases are judged together up front; the rest (timed, GPU) one by one when reached."""
    if case.mode == "fast":
        request.getfixturevalue("untimed_cpu_verdicts")


def _known_false_reject(*verdicts: Verdict):
    """An honest candidate failed by the outside clock's noise alone: record it as the known gap, not as a
    new false reject (any other reason still fails the test)."""
    for v in verdicts:
        if v.verdict == "fail" and codes(v) == ["clock_mismatch"]:
            pytest.xfail(f"{GAPS['clock_noise']} | this run: {v.reasons[0].detail}")


def _params(cases):
    params = []
    for case in cases:
        marks = []
        if case.mode.startswith("gpu"):
            marks.append(pytest.mark.gpu)
        if case.gap:
            marks.append(pytest.mark.xfail(strict=True, reason=GAPS[case.gap]))
        params.append(pytest.param(case, marks=marks, id=case.id))
    return params


@pytest.mark.parametrize("case", _params(CHEATS))
def test_cheat_fails_with_its_code(case, request):
    _prefetch(case, request)
    v = judge(case)
    assert v.verdict == "fail", f"{case.file}: {v.verdict} {v.reasons} speedup={v.speedup}"
    assert set(case.codes) & set(codes(v)), f"{case.file}: expected one of {case.codes}, got {v.reasons}"


@pytest.mark.parametrize("case", _params(HONEST))
def test_honest_twin_passes(case, request):
    _prefetch(case, request)
    v = judge(case)
    if not case.gap:
        _known_false_reject(v)
    assert v.verdict == "pass" and v.reasons == [], f"{case.file}: {v.verdict} {v.reasons}"


# The poison, white-box and deterministic: in a fresh process, Harness._poison and then what the kernel's
# first allocation of an input's size holds (odd sizes as the held-out shapes have them, and large ones).
POISON_PROBE = """
import sys
import torch
from ratchet.judge.check import is_poison
from ratchet.judge.worker import Harness

device = sys.argv[1]
harness = Harness()
harness.device = device
g = torch.Generator(device=device).manual_seed(0)
worst = 1.0
for n in (1000, 4096, 3001, 1 << 20) * 2:
    x = torch.randn(n, generator=g, device=device)
    y = torch.randn(n, generator=g, device=device)
    harness._poison((x, y, 1.0))
    out = torch.empty_like(x)
    worst = min(worst, float(is_poison(out).float().mean()))
print(worst)
"""


def _poisoned_share(device: str) -> float:
    """The smallest share of poisoned bytes in a kernel's first allocation, over the probe's sizes."""
    done = subprocess.run([sys.executable, "-c", POISON_PROBE, device], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.xfail(strict=True, reason=GAPS["cpu_poison"])
def test_cpu_poison_reaches_the_kernels_allocations():
    """#1 and #19 on the CPU: right after the poison, a kernel's torch.empty_like must hold it."""
    worst = _poisoned_share("cpu")
    assert worst >= 0.99, f"only {worst:.1%} of a fresh allocation held the poison"


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason=GAPS["gpu_poison"])
def test_gpu_poison_reaches_the_kernels_allocations():
    """#1 and #19 on CUDA: right after the poison, a kernel's torch.empty_like must hold it, at any size."""
    worst = _poisoned_share("cuda")
    assert worst >= 0.99, f"only {worst:.1%} of a fresh allocation held the poison"


def _worker_median_us(candidate: Path, task: str, shape: dict, calls: int = 9) -> float:
    """The median time the worker's own timer reports for ``candidate`` (the judge's protocol, no verdict)."""
    from ratchet.judge.process import Limits, WorkerProcess

    worker = WorkerProcess(Limits(), "probe")
    try:
        reply, _ = worker.ask({"op": "load", "task": TASKS[task], "device": "cuda", "candidate": str(candidate),
                               "kind": "ratchet", "config": {}}, 180)
        assert "error" not in reply, reply
        times = []
        for i in range(calls):
            reply, _ = worker.ask({"op": "call", "shape": shape, "dtype": "float32", "seed": i, "rng_seed": i,
                                   "first_of_task": i == 0, "flush": True}, 120)
            assert "error" not in reply, reply
            times.append(reply["us"])
        return sorted(times[1:])[len(times[1:]) // 2]
    finally:
        worker.close()


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason=GAPS["side_stream_timing"])
def test_gpu_timer_covers_side_stream_work():
    """#6: the time the worker reports for a kernel that leaves its work on a side stream must cover that
    work: not under the time of the same work joined back to the current stream."""
    shape = {"N": 1 << 26}
    hidden = _worker_median_us(HERE / "cheats" / "p06_side_stream_unpadded.py", "axpby_big", shape)
    joined = _worker_median_us(HERE / "honest" / "h06_side_stream_joined.py", "axpby_big", shape)
    assert hidden * GAIN_ALLOWED >= joined, f"side stream timed at {hidden:.1f} us, the same work joined {joined:.1f} us"


@pytest.mark.gpu
def test_persisting_l2_buys_nothing():
    """#18: the judge resets persisting L2 lines and flushes the L2 before each timed call, so a kernel
    that pins its input in L2 measures like the same kernel without the policy, and never beats the
    roofline."""
    cheat, twin = judge(L2_CHEAT), judge(L2_TWIN)
    _known_false_reject(cheat, twin)  # both compute honestly; only their times are in question
    assert twin.verdict == "pass", twin.reasons
    assert "beyond_roofline" not in codes(cheat), cheat.reasons
    assert cheat.verdict == "pass", cheat.reasons
    for c_row, t_row in zip(cheat.shapes, twin.shapes):
        if c_row.median_us is None:
            continue
        assert c_row.median_us * GAIN_ALLOWED >= t_row.median_us, (
            f"shape {c_row.shape}: persisting L2 {c_row.median_us:.2f} us vs {t_row.median_us:.2f} us without")


def test_catalog_is_covered():
    """Every pattern 1-20 has a cheating candidate here, every file is used, every code is the judge's."""
    covered = {c.pattern for c in CHEATS} | {L2_CHEAT.pattern}
    assert covered == set(range(1, 21)), f"missing patterns: {sorted(set(range(1, 21)) - covered)}"
    for case in CHEATS:
        assert case.codes[0] in FAIL_CODES, f"{case.file}: {case.codes[0]} is not a FAIL code"
        assert case.path.is_file(), case.path
        assert re.match(rf"p{case.pattern:02d}_", case.file), case.file
    for case in HONEST:
        assert case.path.is_file(), case.path
    used = {c.path.name for c in CHEATS + HONEST + [L2_CHEAT, L2_TWIN]} | {"p06_side_stream_unpadded.py"}
    on_disk = {p.name for d in ("cheats", "honest") for p in (HERE / d).glob("*.py")}
    assert on_disk <= used, f"files no case judges: {sorted(on_disk - used)}"


def test_gpu_cases_are_marked():
    """The GPU cases exist on every machine; without CUDA they are skipped, not silently dropped."""
    gpu = [c for c in CHEATS + HONEST if c.mode.startswith("gpu")]
    assert {c.pattern for c in gpu} >= {1, 5, 6, 9, 13, 19}
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the gpu cases above are skipped")
