"""``ratchet profile`` (``ratchet.e2e.profile``): tiny workloads on the CPU.

What is checked against something computed apart from the profiler: the registry ops found per step
equal what the registry's own ``record()`` counts in a plain decode step; their shapes are the ones the
model runs; Amdahl's bounds follow from the shares; the ranking follows the weighted shares; the task
files ``--extract`` writes load, pass the judge with a candidate that calls their reference, and fail a
wrong one.
"""

import inspect
import json
import math
from collections import Counter

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.cli import main
from ratchet.judge import JudgeOptions, evaluate
from ratchet.e2e.extract import extract_tasks
from ratchet.e2e.profile import NOTABLE_SHARE, PHASE_WEIGHTS, amdahl, profile_workload, task_coverage
from ratchet.task import load_task
from ratchet.e2e.workloads import OpRegistry, build
from ratchet.e2e.workloads.runner import DecodeStep, fill_random, random_tokens

BATCH, CONTEXT, PREFILL, STEPS = 2, 24, 16, 2
REGISTRY_OPS = {
    "llama": {"rmsnorm", "add_rmsnorm", "silu_mul", "rope", "decode_attention"},
    "deepseek": {"rmsnorm", "add_rmsnorm", "silu_mul", "moe_route", "rope", "decode_attention"},
}


@pytest.fixture(scope="module")
def profiles():
    return {name: profile_workload(name, "tiny", "cpu", BATCH, CONTEXT, PREFILL, STEPS) for name in REGISTRY_OPS}


def _recorded_decode_step(name):
    """Registry calls of one plain decode step (no profiler, no wrappers), by task and by shape."""
    registry = OpRegistry()
    model = build(name, "tiny", device="cpu", registry=registry)
    cache = model.new_cache(BATCH, CONTEXT + STEPS + 2)
    fill_random(model, cache, CONTEXT)
    step = DecodeStep(model, cache, random_tokens(model, BATCH, 1)[:, 0].clone(), cuda_graph=False)
    with registry.record() as calls:
        step.step()
    return calls


@pytest.mark.parametrize("name", list(REGISTRY_OPS))
def test_registry_ops_are_found_with_their_calls_and_shapes(profiles, name):
    decode = profiles[name].phase("decode")
    expected = Counter(c.task for c in _recorded_decode_step(name))
    assert set(expected) == REGISTRY_OPS[name]
    for task, count in expected.items():
        op = decode.op(task)
        assert op is not None and op.task == task, task
        assert op.time_us > 0 and op.share > 0
        assert op.calls == count  # one profiler range per registry call, averaged over the steps
    shapes = {(c.task, tuple(c.shape.items())) for c in _recorded_decode_step(name)}
    found = {(op.task, tuple(s.shape.items())) for op in decode.ops if op.task for s in op.shapes}
    assert found == shapes
    att = decode.op("decode_attention").shapes[0].shape
    # the padded cache the step reads: context, steps and warm-up, rounded up to CACHE_ALIGN (64) positions
    assert att["B"] == BATCH and att["L"] == -(-(CONTEXT + STEPS + 2) // 64) * 64 == 64


def test_registry_ranges_claim_the_ops_inside_them(profiles):
    # rmsnorm's reference runs aten::rsqrt; llama runs rsqrt nowhere else, so none may be left outside.
    llama = profiles["llama"]
    for phase in llama.phases:
        assert phase.op("aten::rsqrt") is None
    linear = llama.phase("decode").op("aten::linear")
    # 2 layers x (q, k, v, o, gate_up, down) + the LM head.
    assert linear.task is None and linear.family == "gemm" and linear.calls == 13
    assert [[BATCH, 64], [512, 64], []] in [s.shape for s in linear.shapes]


@pytest.mark.parametrize("name", list(REGISTRY_OPS))
def test_shares_add_up_and_the_rest_is_reported(profiles, name):
    for phase in profiles[name].phases:
        assert phase.step_us > 0 and phase.unprofiled_step_us > 0
        assert phase.basis == "cpu_wall_profiled"
        total = sum(op.share for op in phase.ops)
        assert 0 < total <= 1 + 1e-9
        assert phase.other_us >= 0
        assert total + phase.other_share == pytest.approx(1.0, abs=1e-9)
        for op in phase.ops:
            assert op.share == pytest.approx(op.time_us / phase.step_us)
            assert op.time_us == pytest.approx(sum(s.time_us for s in op.shapes))


def test_amdahl_formula():
    assert amdahl(0.0) == 1.0
    assert amdahl(0.5) == pytest.approx(2.0)
    assert amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl(0.2, 4.0) == pytest.approx(1 / (0.8 + 0.05))
    assert amdahl(1.0) == math.inf


@pytest.mark.parametrize("name", list(REGISTRY_OPS))
def test_amdahl_bounds_follow_from_the_shares(profiles, name):
    for phase in profiles[name].phases:
        for op in phase.ops:
            assert op.speedup_if_free == pytest.approx(1.0 / (1.0 - op.share))
            assert op.speedup_if_2x == pytest.approx(1.0 / (1.0 - op.share / 2.0))
            assert 1.0 <= op.speedup_if_2x <= op.speedup_if_free


@pytest.mark.parametrize("name", list(REGISTRY_OPS))
def test_ranking_by_weighted_share(profiles, name):
    prof = profiles[name]
    worth = prof.worth_a_run
    assert {c.task for c in worth} == REGISTRY_OPS[name]
    weights = sum(PHASE_WEIGHTS[p.name] for p in prof.phases)
    for c in worth + prof.no_task:
        expect = sum(PHASE_WEIGHTS[p.name] * (p.op(c.name).share if p.op(c.name) else 0.0) for p in prof.phases)
        assert c.score == pytest.approx(expect / weights)
        for phase, share in c.shares.items():
            assert c.speedup_if_free[phase] == pytest.approx(1.0 / (1.0 - share))
    scores = [c.score for c in worth]
    assert scores == sorted(scores, reverse=True)
    others = [c.score for c in prof.no_task]
    assert others == sorted(others, reverse=True)
    for c in prof.no_task:
        assert c.task is None and max(c.shares.values()) >= NOTABLE_SHARE
    for c in worth:  # each task's shapes say whether the task judges them
        for shapes in c.shapes.values():
            assert all({"in_task_public", "in_task_held_out", "dtype_judged"} <= set(s) for s in shapes)


def test_task_coverage_sees_a_public_shape():
    task = load_task("rmsnorm")
    shape = dict(task.cpu.public[0])
    got = task_coverage("rmsnorm", shape, "float32", "cpu")
    assert got["in_task_public"] and got["dtype_judged"]
    assert not task_coverage("rmsnorm", {"T": 10 ** 9, "H": 3}, "float64", "cpu")["in_task_public"]


def _candidate_calling_reference(path, folder, task):
    params = ", ".join(inspect.signature(task.reference).parameters)
    cand = folder / f"calls_reference_{task.name}.py"
    cand.write_text("from ratchet.task import load_task\n\n"
                    f"_REFERENCE = load_task({str(path)!r}).reference\n\n\n"
                    f"def kernel({params}):\n    return _REFERENCE({params})\n")
    return load_candidate(str(cand))


def _judge(task, candidate):
    return evaluate(task, candidate, None, JudgeOptions(device="cpu", time_it=False))


def test_extract_writes_tasks_the_judge_passes(profiles, tmp_path):
    prof = profiles["deepseek"]
    written = {e.name: e for e in extract_tasks(prof, tmp_path)}
    assert set(written) == {"deepseek_linear", "deepseek_grouped_mm", "deepseek_prefill_attention", "deepseek_bmm"}
    for e in written.values():
        task = load_task(e.path)
        assert task.name == e.name and task.dtypes == (torch.float32,)
        assert [dict(s) for s in task.gpu.public] == e.shapes  # the profiled shapes are the public ones
        assert all(task.shape_weight(s) > 0 for s in task.gpu.public)
        verdict = _judge(task, _candidate_calling_reference(e.path, tmp_path, task))
        assert verdict.verdict == "pass", (e.name, verdict.reasons)
        assert _judge(task, load_candidate(e.seed)).verdict == "pass"  # the seed `ratchet run` starts from
    # The real shapes: the LM head's GEMM, and the experts' grouped GEMM over every routed slot.
    assert {"M": BATCH, "N": 512, "K": 64} in written["deepseek_linear"].shapes
    assert {"R": BATCH * 8, "E": BATCH * 8, "K": 64, "N": 32} in written["deepseek_grouped_mm"].shapes


def test_extracted_tasks_fail_wrong_candidates(profiles, tmp_path):
    written = {e.name: e for e in extract_tasks(profiles["deepseek"], tmp_path)}
    wrong = {
        # every row through the first expert: ignores the routing
        "deepseek_grouped_mm": "def kernel(a, b, offs):\n    return a @ b[0]\n",
        # attention without the causal mask
        "deepseek_prefill_attention": ("import torch.nn.functional as F\n\n\ndef kernel(q, k, v):\n"
                                       "    return F.scaled_dot_product_attention(q, k, v)\n"),
    }
    for name, source in wrong.items():
        cand = tmp_path / f"wrong_{name}.py"
        cand.write_text(source)
        verdict = _judge(load_task(written[name].path), load_candidate(str(cand)))
        assert verdict.verdict == "fail", (name, verdict.verdict, verdict.reasons)


def test_extract_keeps_existing_files_unless_forced(profiles, tmp_path):
    first = extract_tasks(profiles["llama"], tmp_path, families=["prefill_attention"])
    assert [e.name for e in first] == ["llama_prefill_attention"] and first[0].written
    path = tmp_path / "llama_prefill_attention" / "task.py"
    path.write_text(path.read_text() + "# edited\n")
    again = extract_tasks(profiles["llama"], tmp_path, families=["prefill_attention"])
    assert not again[0].written and path.read_text().endswith("# edited\n")
    forced = extract_tasks(profiles["llama"], tmp_path, families=["prefill_attention"], force=True)
    assert forced[0].written and not path.read_text().endswith("# edited\n")


def test_cli_json_is_one_object(capsys):
    rc = main(["profile", "llama", "--device", "cpu", "--batch", "1", "--context", "8", "--prefill", "8",
               "--steps", "1", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0
    data = json.loads(out)
    assert data["workload"] == "llama" and data["size"] == "tiny" and data["device"] == "cpu"
    assert [p["name"] for p in data["phases"]] == ["decode", "prefill"]
    assert {c["task"] for c in data["worth_a_run"]} == REGISTRY_OPS["llama"]
    decode = data["phases"][0]
    assert sum(o["share"] for o in decode["ops"]) + decode["other_share"] == pytest.approx(1.0)
    assert "ratchet profile: profiling" in err  # progress goes to stderr


def test_cli_table_and_extract(tmp_path, capsys):
    rc = main(["profile", "llama", "--size", "tiny", "--device", "cpu", "--context", "8", "--prefill", "8",
               "--steps", "1", "--extract", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "Tasks worth a run" in out and "decode_attention" in out and "aten::linear" in out
    task_file, seed = tmp_path / "llama_linear" / "task.py", tmp_path / "llama_linear" / "seeds" / "torch_reference.py"
    assert "wrote" in out and task_file.exists() and seed.exists()
    # `ratchet eval` takes the written file as it is (correctness only here, to stay fast).
    rc = main(["eval", str(task_file), str(seed), "--device", "cpu", "--no-timing", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert rc == 0 and verdict["verdict"] == "pass", verdict["reasons"]


@pytest.mark.parametrize("argv", [
    ["profile", "gpt2"],
    ["profile", "llama", "--batch", "0"],
    ["profile", "llama", "--context", "-1"],
    ["profile", "llama", "--steps", "many"],
    ["profile", "llama", "--size", "huge"],
    ["profile", "llama", "--size", "full", "--device", "cpu"],
    ["profile", "llama", "--force"],
])
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ratchet: error:") and "\n" not in err


@pytest.mark.gpu
def test_profile_on_cuda_times_the_graph():
    prof = profile_workload("llama", "tiny", "cuda", BATCH, CONTEXT, PREFILL, STEPS)
    decode = prof.phase("decode")
    assert decode.graph_step_us and decode.graph_step_us > 0
    assert decode.basis in ("cuda_graph", "device_kernels")
    assert {o.task for o in decode.ops if o.task} == REGISTRY_OPS["llama"]
    assert sum(o.share for o in decode.ops) <= 1 + 1e-9
