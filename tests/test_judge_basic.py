"""The judge on a tiny task: honest candidates pass, wrong ones fail, broken ones error, and the
test process lives through crashes, hangs and runaway allocation."""

import dataclasses
from pathlib import Path

import pytest
import torch

from ratchet.candidate import CandidateError, load_candidate
from ratchet.judge import JudgeOptions, Limits, evaluate
from ratchet.task import load_task

DATA = Path(__file__).parent / "data"
TASK = load_task(str(DATA / "tasks" / "axpby.py"))
FAST = JudgeOptions(device="cpu", time_it=False)


def judge(name, options=FAST, config=None):
    return evaluate(TASK, load_candidate(DATA / "candidates" / f"axpby_{name}.py"), config, options)


def codes(verdict):
    return [r.code for r in verdict.reasons]


def test_honest_passes_every_config():
    for config in load_candidate(DATA / "candidates" / "axpby_honest.py").all_configs():
        v = judge("honest", config=config)
        assert v.verdict == "pass", v.reasons
        assert v.reasons == []
        assert [s.held_out for s in v.shapes] == [False, False, True]


def test_honest_timed_has_speedup_and_rows():
    v = judge("honest", JudgeOptions(device="cpu"))
    assert v.verdict == "pass", v.reasons
    public = [s for s in v.shapes if not s.held_out]
    assert all(s.median_us > 0 and s.ref_median_us > 0 and s.reps >= 8 for s in public)
    assert all(s.mode == "eager" for s in public)
    assert v.speedup == pytest.approx(
        (public[0].speedup * public[1].speedup) ** 0.5, rel=1e-9)
    assert all(0 < s.roofline_fraction < 1.15 for s in public)


@pytest.mark.parametrize("name, verdict, code", [
    ("wrong", "fail", "wrong_output"),
    ("numpy", "fail", "wrong_type"),
    ("half", "fail", "wrong_output"),
    ("forbidden", "fail", "forbidden_call"),
    ("segfault", "error", "crash"),
    ("exit", "error", "crash"),
    ("import_error", "error", "import_error"),
    ("bad_signature", "error", "bad_signature"),
    ("raises", "error", "kernel_exception"),
])
def test_bad_candidates(name, verdict, code):
    v = judge(name)
    assert v.verdict == verdict, v.reasons
    assert code in codes(v)


def test_hang_is_a_timeout_error():
    v = judge("hang", JudgeOptions(device="cpu", time_it=False, limits=Limits(first_call_s=3, call_s=3)))
    assert v.verdict == "error" and codes(v) == ["timeout"]


def test_runaway_allocation_is_stopped():
    limits = Limits(rss_bytes=1 * 2**30, first_call_s=60)
    v = judge("runaway", JudgeOptions(device="cpu", time_it=False, limits=limits))
    assert v.verdict == "error" and codes(v) == ["out_of_memory"]


def test_config_outside_space_is_rejected():
    cand = load_candidate(DATA / "candidates" / "axpby_honest.py")
    with pytest.raises(CandidateError, match="not in SPACE"):
        cand.resolve_config({"INPLACE": 3})
    with pytest.raises(CandidateError, match="not in the candidate's SPACE"):
        cand.resolve_config({"BLOCK": 3})


def test_file_without_kernel_is_a_candidate_error():
    with pytest.raises(CandidateError, match="defines no kernel"):
        load_candidate(DATA / "candidates" / "axpby_no_kernel.py")


def test_syntax_error_is_a_candidate_error():
    with pytest.raises(CandidateError, match="syntax error"):
        load_candidate(DATA / "candidates" / "axpby_syntax.py")


def test_device_lock_holds_back_everything_after_the_first_call():
    """Two evaluations sharing a GPU: the second may import and compile, then waits for the lock."""
    import threading

    lock = threading.Lock()
    lock.acquire()
    done = {}
    options = JudgeOptions(device="cpu", time_it=False, device_lock=lock)
    thread = threading.Thread(target=lambda: done.setdefault("v", judge("honest", options)))
    thread.start()
    thread.join(timeout=8)
    assert thread.is_alive() and "v" not in done  # blocked on the lock, after its first call
    lock.release()
    thread.join(timeout=120)
    assert done["v"].verdict == "pass" and not lock.locked()


def test_timed_calls_say_where_the_timing_time_went():
    v = judge("honest", JudgeOptions(device="cpu"))
    assert v.verdict == "pass", v.reasons
    public = [s for s in v.shapes if not s.held_out]
    # Every timed call of both sides (warm-up calls not counted), and each part's mean host time.
    assert v.timed_calls["calls"] == 2 * sum(s.reps for s in public)
    means = v.timed_calls["mean_us"]
    assert set(means) == {"inputs", "prepare", "launch", "sync", "checks", "round_trip", "kernel"}
    assert all(value >= 0 for value in means.values())
    assert means["launch"] >= means["kernel"] * 0.5  # on the CPU the launch is the call itself
    per_call_s = sum(value for key, value in means.items() if key != "kernel") * v.timed_calls["calls"] / 1e6
    assert per_call_s <= v.phases_s["timing"]


def test_a_kernel_that_reuses_one_output_buffer_passes_when_timed(tmp_path):
    # Timed calls run in batches and the judge checks some earlier call of a batch after the batch: it
    # must judge what that call returned (its snapshot), not the buffer a later call overwrote.
    static = tmp_path / "axpby_static_out.py"
    static.write_text(
        "import torch\n\n"
        "_OUT = {}\n\n"
        "def kernel(x, y, a):\n"
        "    out = _OUT.get(x.numel())\n"
        "    if out is None:\n"
        "        out = _OUT[x.numel()] = torch.empty_like(x)\n"
        "    return torch.add(y, x, alpha=a, out=out)\n"
    )
    v = evaluate(TASK, load_candidate(static), None, JudgeOptions(device="cpu"))
    assert v.verdict == "pass", v.reasons
    assert all(s.reps >= 8 for s in v.shapes if not s.held_out)


def test_a_kernel_wrong_on_most_timed_calls_is_caught_by_the_batch_checks(tmp_path):
    # Right on its first calls (the correctness phase and warm-up), then right only on every eighth call:
    # whichever calls of a batch the judge picks after the batch, most are wrong.
    sly = tmp_path / "axpby_sly.py"
    sly.write_text(
        "import torch\n\n"
        "CALLS = [0]\n\n"
        "def kernel(x, y, a):\n"
        "    CALLS[0] += 1\n"
        "    out = torch.add(y, x, alpha=a)\n"
        "    if CALLS[0] > 40 and CALLS[0] % 8:\n"
        "        out[0] += 1.0\n"
        "    return out\n"
    )
    v = evaluate(TASK, load_candidate(sly), None, JudgeOptions(device="cpu"))
    assert v.verdict == "fail" and "timed_output_wrong" in codes(v), v.reasons


def test_a_triton_candidate_on_the_cpu_runs_under_the_interpreters_limits(tmp_path):
    """Triton's interpreter runs each program in Python: its calls get INTERPRETER_LIMIT_FACTOR times the
    running limits; a plain torch candidate keeps the usual ones."""
    from ratchet.judge.evaluation import INTERPRETER_LIMIT_FACTOR, Evaluation

    task = load_task(str(DATA / "tasks" / "axpby.py"))
    triton_file = load_candidate(DATA / "candidates" / "axpby_triton_body_raises.py")
    torch_file = load_candidate(DATA / "candidates" / "axpby_honest.py")
    base = Limits()
    scaled = Evaluation(task, triton_file, {}, JudgeOptions(device="cpu")).limits
    assert INTERPRETER_LIMIT_FACTOR == 6.0
    assert (scaled.first_call_s, scaled.call_floor_s, scaled.call_s) == (180.0, 60.0, 360.0)
    assert scaled.compile_s == base.compile_s and scaled.rss_bytes == base.rss_bytes
    assert Evaluation(task, torch_file, {}, JudgeOptions(device="cpu")).limits == base
    mention = tmp_path / "mentions_triton.py"  # the word in a comment is not an import
    mention.write_text("# faster than a triton kernel would be\n" + (DATA / "candidates" / "axpby_honest.py").read_text())
    assert Evaluation(task, load_candidate(mention), {}, JudgeOptions(device="cpu")).limits == base


def _refuses_doubles(x, y, a):
    if x.dtype == torch.float64:
        raise RuntimeError("no float64 kernel for this op\nsecond line")
    return a * x + y


def test_a_reference_that_raises_in_the_judge_is_a_reference_error_verdict():
    """The judge runs the reference upcast to the task's reference dtype; a task whose reference fails
    there (grouped_mm has no float64) is broken: an `error` verdict naming the reference's own message,
    never a traceback out of evaluate()."""
    broken = dataclasses.replace(TASK, reference=_refuses_doubles, reference_dtype=torch.float64)
    v = evaluate(broken, load_candidate(DATA / "candidates" / "axpby_honest.py"), None, FAST)
    assert v.verdict == "error"
    assert codes(v) == ["reference_error"]
    assert v.reasons[0].detail == "the reference raised RuntimeError: no float64 kernel for this op"


def test_an_atol_of_the_outputs_rms_scales_with_the_output():
    """Tolerance(atol_of_rms=True): atol is that fraction of the reference's RMS. At an output scale of
    0.005, zeros are within an absolute atol of 0.03 and far outside 3% of the RMS; an honest 1% error
    passes at any scale."""
    from ratchet.judge.check import compare_close
    from ratchet.task import Tolerance

    ref = torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.005
    honest = ref * (1 + 0.01 * torch.randn(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    absolute, of_rms = Tolerance(atol=0.03, rtol=0.03), Tolerance(atol=0.03, rtol=0.03, atol_of_rms=True)
    assert compare_close(torch.zeros_like(ref), ref, absolute, "x") == []
    (reason,) = compare_close(torch.zeros_like(ref), ref, of_rms, "x")
    assert reason.code == "wrong_output" and "3984 of 4096 elements beyond atol=0.000149 (0.03 of the output RMS)" in reason.detail
    for scale in (1.0, 1e3):
        assert compare_close(honest * scale, ref * scale, of_rms, "x") == []


SCALAR_TASK = '''
import torch
from ratchet.task import ShapeSet, Task


def reference(x, beta):
    return x * beta


def make_inputs(shape, dtype, device, generator):
    x = torch.randn(shape["N"], generator=generator, device=device).to(dtype)
    beta = torch.rand((), generator=generator, device=device).to(dtype)  # a module's 0-dim buffer (xIELU's beta)
    return x, beta


TASK = Task(name="scaled", reference=reference, make_inputs=make_inputs, dtypes=(torch.float32,),
            gpu=ShapeSet(public=[{"N": 4096}]), cpu=ShapeSet(public=[{"N": 1000}, {"N": 7}]))
'''


@pytest.mark.parametrize("body, verdict, code", [
    ("return x * beta", "pass", None),
    ("beta.mul_(2.0)\n    return x * beta / 2.0", "fail", "input_mutated"),  # its twin changes the scalar
])
def test_a_zero_dim_tensor_input_is_checked_like_any_other(tmp_path, body, verdict, code):
    """A 0-dim tensor argument (a module's scalar buffer) was a kernel_exception for every candidate: its
    bytes could not be viewed. It is judged as any input: passed along, and its mutation caught."""
    task_file, cand = tmp_path / "scaled.py", tmp_path / "cand.py"
    task_file.write_text(SCALAR_TASK)
    cand.write_text(f"def kernel(x, beta):\n    {body}\n")
    v = evaluate(load_task(str(task_file)), load_candidate(cand), None, FAST)
    assert v.verdict == verdict, v.reasons
    assert codes(v) == ([code] if code else [])
