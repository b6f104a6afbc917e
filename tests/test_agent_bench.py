"""The agent benchmark (benchmarks/agent_bench/): every task loads and its plain-torch start passes on the
CPU shapes; each correctness rule refuses a wrong kernel; setup writes one run and program.md per op (for
a GPU run, on this machine without one) or drives an LLM-proposer run (against a loopback model, with
timing); the table reads a recorded ledger."""

import csv
import importlib.util
import io
import json
import sys
import math
from pathlib import Path

import pytest
import torch

from ratchet.cli import main
from ratchet.run.ledger import Ledger
from ratchet.task import load_task
from seed_files import import_file

BENCH = Path(__file__).parent.parent / "benchmarks" / "agent_bench"
OPS = sorted(p.parent.name for p in BENCH.glob("*/task.py"))


def _bench_module():
    spec = importlib.util.spec_from_file_location("agent_bench_script", BENCH / "agent_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_there_are_six_ops_each_with_a_task_and_a_start():
    assert OPS == ["add_rmsnorm_fp8", "geglu", "min_p", "qwen3_moe_experts", "rope_paged_kv", "spec_accept"]
    for op in OPS:
        task = load_task(str(BENCH / op / "task.py"))
        assert task.name == op and task.cost is not None and task.weight is not None
        assert task.gpu.held_out is not None and task.cpu.held_out is not None
        assert (BENCH / op / "start.py").is_file() and not (BENCH / op / "seeds").exists()
        # Task files import only the public task API.
        imports = [line for line in (BENCH / op / "task.py").read_text().splitlines() if "ratchet" in line
                   and line.startswith(("import", "from"))]
        assert imports and all(line.startswith("from ratchet.task import") for line in imports), imports


def _judged_start(op, device, capsys):
    """The op's task and the verdict of its start file on ``device`` (no timing), which must pass."""
    code = main(["eval", str(BENCH / op / "task.py"), str(BENCH / op / "start.py"), "--device", device,
                 "--no-timing", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert (code, verdict["verdict"], verdict["reasons"]) == (0, "pass", [])
    return load_task(str(BENCH / op / "task.py")), verdict


@pytest.mark.parametrize("op", OPS)
def test_start_passes_on_the_cpu_shapes(op, capsys):
    task, verdict = _judged_start(op, "cpu", capsys)
    public = len(task.cpu.public) * len(task.dtypes)
    assert sum(not row["held_out"] for row in verdict["shapes"]) == public
    assert sum(row["held_out"] for row in verdict["shapes"]) == task.cpu.held_out.count * len(task.dtypes)


def _inputs(op, shape, dtype, seed=3):
    task = load_task(str(BENCH / op / "task.py"))
    return task, task.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(seed))


def _refs(task, inputs):
    wide = tuple(x.to(task.reference_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)
    return tuple(task.reference(*wide))


def test_min_p_rule_is_exact_and_refuses_a_wrong_cut():
    task, inputs = _inputs("min_p", {"B": 16, "V": 3001}, torch.float32)
    (ref,) = (task.reference(*inputs),)
    assert task.check(inputs, (ref,), (ref,), torch.float32) == []
    # Cutting at min_p * max of the logits instead of the probabilities keeps the wrong tokens.
    logits, min_p = inputs
    wrong = logits.masked_fill(logits < min_p[:, None] * logits.max(-1, keepdim=True).values, float("-inf"))
    assert any("min-p cut" in d for d in task.check(inputs, (wrong,), (ref,), torch.float32))
    # A kept logit that is not copied bit for bit (a bf16 round trip) fails.
    rounded = ref.to(torch.bfloat16).to(torch.float32)
    assert any("copied exactly" in d for d in task.check(inputs, (rounded,), (ref,), torch.float32))


def test_fp8_rule_allows_one_rounding_and_refuses_wrong_scales_and_truncation():
    shape = {"T": 9, "H": 1000}
    task, inputs = _inputs("add_rmsnorm_fp8", shape, torch.bfloat16)
    refs = _refs(task, inputs)
    start = import_file(BENCH / "add_rmsnorm_fp8" / "start.py")
    q, scale, residual = start.kernel(*inputs)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (9, 1)
    assert task.check(inputs, (q, scale, residual), refs, torch.bfloat16) == []
    bad_scale = task.check(inputs, (q, scale * 1.05, residual), refs, torch.bfloat16)
    assert bad_scale and "scales wrong" in bad_scale[0]
    # Rounding toward zero (truncation) instead of to nearest: up to a full e4m3 ulp off.
    x, r, w, eps = inputs
    nr = (x + r).float()
    ynorm = nr * torch.rsqrt(nr.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    trunc = _truncate_e4m3(ynorm / scale)
    assert trunc.dtype == torch.float8_e4m3fn and not torch.equal(trunc.view(torch.uint8), q.view(torch.uint8))
    details = task.check(inputs, (trunc, scale, residual), refs, torch.bfloat16)
    assert details and "dequantized" in details[0]


def _truncate_e4m3(v):
    """Round toward zero onto the e4m3 grid: the nearest value, stepped one grid point toward zero
    wherever rounding to nearest went away from zero."""
    near = v.clamp(-448, 448).to(torch.float8_e4m3fn)
    back = near.to(torch.float32)
    away = back.abs() > v.abs()
    bits = near.view(torch.uint8)
    stepped = torch.where(away & (bits & 0x7F > 0), bits - 1, bits).view(torch.float8_e4m3fn)
    return stepped


def test_spec_accept_rule_sees_a_bf16_log_softmax():
    task, inputs = _inputs("spec_accept", {"B": 4, "S": 3, "V": 4099}, torch.float32)
    refs = _refs(task, inputs)
    start = import_file(BENCH / "spec_accept" / "start.py")
    from ratchet.judge.check import compare_close

    tol = task.tolerances[torch.float32]
    outs = start.kernel(*inputs)
    assert all(compare_close(o, r, tol, "x") == [] for o, r in zip(outs, refs))
    low = start.kernel(*(t.to(torch.bfloat16).float() if t.is_floating_point() else t for t in inputs))
    assert any(compare_close(o, r, tol, "x") for o, r in zip(low, refs))


def test_rope_paged_kv_writes_only_the_mapped_slots():
    task, inputs = _inputs("rope_paged_kv", {"T": 40, "S": 2, "Hkv": 1, "D": 32}, torch.float32)
    k_out, v_out = task.reference(*inputs)
    key, value, cos, sin, k_cache, v_cache, slots = inputs
    valid = slots[slots >= 0]
    assert len(set(valid.tolist())) == len(valid) and (slots < 0).any()  # padding present at T >= 16
    flat_k, flat_v = k_out.view(-1, 1, 32), v_out.view(-1, 1, 32)
    untouched = torch.ones(flat_k.shape[0], dtype=torch.bool)
    untouched[valid] = False
    assert torch.equal(flat_k[untouched], k_cache.view(-1, 1, 32)[untouched])
    t = int((slots >= 0).nonzero()[0])
    assert torch.equal(flat_v[slots[t]], value[t])
    k1, k2 = key[t, :, :16], key[t, :, 16:]
    expected = torch.cat((k1 * cos[t] - k2 * sin[t], k2 * cos[t] + k1 * sin[t]), dim=-1)
    assert torch.allclose(flat_k[slots[t]], expected, atol=1e-6)


def test_moe_cost_counts_the_experts_decode_reaches():
    task = load_task(str(BENCH / "qwen3_moe_experts" / "task.py"))
    one = task.cost({"T": 1, "H": 2048, "I": 768, "E": 128, "K": 8}, torch.bfloat16)
    many = task.cost({"T": 256, "H": 2048, "I": 768, "E": 128, "K": 8}, torch.bfloat16)
    expert_bytes = 3 * 768 * 2048 * 2
    assert math.isclose(one.bytes, 8 * expert_bytes + 2 * 2048 * 2 + 96)
    assert 0.89 * 128 * expert_bytes < many.bytes < 128 * expert_bytes + 4e6


# -- setup and table -----------------------------------------------------------------------------------


def test_setup_writes_a_gpu_run_and_program_per_op_without_a_gpu(tmp_path, capsys):
    bench = _bench_module()
    ledger = tmp_path / "l.sqlite"
    code = bench.main(["setup", "--device", "cuda", "--device-name", "H200", "--ledger", str(ledger), "--out",
                       str(tmp_path / "runs"), "--target", "2x"])
    assert code == 0, capsys.readouterr().err
    with Ledger(ledger) as led:
        runs = led.list_runs()
    assert sorted(r["task"] for r in runs) == OPS
    assert {(r["device"], r["device_name"], r["proposer"], r["goal_speedup"]) for r in runs} == {
        ("cuda", "NVIDIA H200", "agent", 2.0)}
    for run in runs:
        folder = tmp_path / "runs" / run["task"]
        text = (folder / "program.md").read_text()
        assert f"run `{run['id']}`" in text and (folder / "start.py").is_file()
        assert str((folder / "start.py").resolve()) in text  # named as the starting point
        assert "not measured on this device yet" in text and "Datasheet leads, not measurements" in text
    min_p = (tmp_path / "runs" / "min_p" / "program.md").read_text()
    assert "| B=256 V=151936 | 1 | 64.8 | - |" in min_p  # a GPU shape: 2 x 256 x 151936 x 4 B at 4.8 TB/s
    # The CPU set only where the correctness-only CPU check is named, not among the shapes judged.
    assert "{'B': 64, 'V': 1000}" not in min_p.split("The CPU check runs ")[0]
    assert "The CPU check runs {'B': 1, 'V': 1000}, {'B': 8, 'V': 4099}, {'B': 64, 'V': 1000}." in min_p
    # The torch.compile baseline needs the device: refused in one line before any run is created.
    code = bench.main(["setup", "--device", "cuda", "--device-name", "H200", "--ledger", str(tmp_path / "m.sqlite"),
                       "--compile-baseline", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no CUDA device" in err
    assert not (tmp_path / "m.sqlite").exists() or not Ledger(tmp_path / "m.sqlite").list_runs()


def _verdict(verdict, speedup=None, codes=(), wall=30.0):
    return {"verdict": verdict, "speedup": speedup, "reasons": [{"code": c, "detail": "d"} for c in codes],
            "shapes": [], "judge_wall_s": wall}


def test_table_reads_a_recorded_ledger(tmp_path, capsys):
    bench = _bench_module()
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        geglu = led.create_run("geglu", str(BENCH / "geglu" / "task.py"), "cuda", "NVIDIA H200", "agent")
        for i, v in enumerate([_verdict("pass", 1.5), _verdict("fail", codes=("wrong_output",)),
                               _verdict("pass", 3.0), _verdict("error", codes=("compile_error",)),
                               _verdict("fail", codes=("wrong_output",))]):
            led.record_attempt(geglu, f"c{i}.py", f"# {i}", {}, v, "agent")
        base = led.create_run("geglu", str(BENCH / "geglu" / "task.py"), "cuda", "NVIDIA H200", "baseline")
        led.record_attempt(base, "tc.py", "# tc", {}, _verdict("pass", 2.0, wall=60.0), "baseline")
        minp = led.create_run("min_p", str(BENCH / "min_p" / "task.py"), "cuda", "NVIDIA H200", "agent")
        led.record_attempt(minp, "m.py", "# m", {}, _verdict("pass", 4.0, wall=90.0), "agent")
        other = led.create_run("rmsnorm", "rmsnorm", "cuda", "NVIDIA H200", "agent")  # not a benchmark op
        led.record_attempt(other, "r.py", "# r", {}, _verdict("pass", 9.0), "agent")
    assert bench.main(["table", "--ledger", str(path), "--csv"]) == 0
    rows = {r[0]: r for r in csv.reader(io.StringIO(capsys.readouterr().out))}
    assert rows["op"][:4] == ["op", "attempts", "passed", "best vs reference"]
    # 5 attempts, 2 passed, best 3.0x; torch.compile 2.0x, so 1.5x over it; 150 judge seconds.
    assert rows["geglu"] == ["geglu", "5", "2/5 (40%)", "3.00x", "2.00x", "1.50x", "2.5",
                             "wrong_output 2, compile_error 1"]
    assert rows["min_p"] == ["min_p", "1", "1/1 (100%)", "4.00x", "not measured", "not measured", "1.5", "-"]
    assert rows["spec_accept"] == ["spec_accept", "0", "0/0", "-", "not measured", "not measured", "0.0", "-"]
    assert "rmsnorm" not in rows
    # Markdown by default; another device's runs are left out when --device says so.
    assert bench.main(["table", "--ledger", str(path), "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "| geglu | 0 | 0/0 | - | not measured | not measured | 0.0 | - |" in text
    assert bench.main(["table", "--ledger", str(tmp_path / "none.sqlite")]) == 2


def test_setup_with_the_llm_proposer_needs_a_model_in_one_line(tmp_path, capsys):
    bench = _bench_module()
    code = bench.main(["setup", "--proposer", "llm", "--device", "cpu", "--ledger", str(tmp_path / "l.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--llm-model" in err
    code = bench.main(["setup", "--ops", "softmax", "--device", "cpu", "--ledger", str(tmp_path / "l.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown op 'softmax'" in err
    assert not (tmp_path / "l.sqlite").exists() or not Ledger(tmp_path / "l.sqlite").list_runs()


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_start_passes_on_the_gpu_shapes(op, capsys):
    """On a GPU: the GPU shape set (real vocabularies, 128 experts, paged caches) and its held-out ranges."""
    task, verdict = _judged_start(op, "cuda", capsys)
    assert sum(not row["held_out"] for row in verdict["shapes"]) == len(task.gpu.public) * len(task.dtypes)


GEGLU_ANSWER = '''Compute the gate in chunks of rows to keep the temporaries small.

```python
import math

import torch

SPACE = {"ROWS": [8, 32]}


def kernel(x, ROWS=8):
    half = x.shape[-1] // 2
    out = torch.empty(x.shape[0], half, dtype=x.dtype, device=x.device)
    c = math.sqrt(2.0 / math.pi)
    for start in range(0, x.shape[0], ROWS):
        gate = x[start:start + ROWS, :half].float()
        up = x[start:start + ROWS, half:].float()
        out[start:start + ROWS] = (0.5 * gate * (1.0 + torch.tanh(c * (gate + 0.044715 * gate ** 3))) * up).to(x.dtype)
    return out
```
'''


@pytest.mark.slow
def test_setup_with_the_llm_proposer_drives_a_run(tmp_path, monkeypatch, capsys):
    from test_llm_proposer import FakeLLM

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    bench, fake = _bench_module(), FakeLLM([{"text": GEGLU_ANSWER}])
    ledger = tmp_path / "l.sqlite"
    try:
        code = bench.main(["setup", "--proposer", "llm", "--llm-model", "fake-coder", "--llm-base-url",
                           fake.url + "/v1", "--device", "cpu", "--ops", "geglu", "--budget", "2",
                           "--ledger", str(ledger)])
    finally:
        fake.close()
    assert code == 0, capsys.readouterr().err
    with Ledger(ledger) as led:
        (run,) = led.list_runs()
        attempts = led.attempts(run["id"])
    assert (run["task"], run["proposer"], run["device"]) == ("geglu", "llm", "cpu")
    assert [a["proposer"] for a in attempts] == ["tune", "llm"] and all(a["verdict"] == "pass" for a in attempts)
    assert attempts[0]["source"] == (BENCH / "geglu" / "start.py").read_text()
    # Both were timed on the CPU beside the reference (the start is the reference's own math).
    assert all(0.2 < a["speedup"] < 5.0 for a in attempts)
    assert all(r["median_us"] > 0 and r["ref_median_us"] > 0 for r in attempts[0]["shapes"] if not r["held_out"])
    assert "gelu_tanh" in fake.prompts()[0]  # the task's brief reached the model
    assert bench.main(["table", "--ledger", str(ledger), "--csv"]) == 0
    rows = {r[0]: r for r in csv.reader(io.StringIO(capsys.readouterr().out))}
    assert rows["geglu"][1:3] == ["2", "2/2 (100%)"]
