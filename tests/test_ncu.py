"""ncu's counters (ratchet.diagnose.ncu) offline: the raw-page CSV parser on fixtures in ncu's format, the
time-weighted summary, the counter rule, every way a profile is unavailable (with a fake ncu), where the
counters show (`ratchet show`, the brief) and when the loop asks for them (passing GPU attempts only)."""

import json
import random
import stat
import sys
from pathlib import Path

import pytest

from ratchet.diagnose import ncu
from ratchet.diagnose.bottleneck import (COMPUTE, MEMORY, OVERHEAD, classify_with_counters, counters_for_row)
from ratchet.candidate import load_candidate
from ratchet.cli import main
from ratchet.judge import JudgeOptions
from ratchet.judge.device_lock import DeviceLock
from ratchet.run.ledger import Ledger
from ratchet.run.loop import Loop, RunLimits
from ratchet.run.record import attach_counters
from ratchet.search.tune import TuneProposer
from ratchet.task import BUILTIN_TASKS_DIR, load_task
from test_ledger import SOURCE, make_verdict, new_run

DATA = Path(__file__).parent / "data"
FIX = DATA / "ncu"
TASK = str(DATA / "tasks" / "axpby.py")
TUNABLE = DATA / "candidates" / "axpby_tunable.py"


# -- parsing --------------------------------------------------------------------------------------------


def test_raw_page_rows_parse_into_kernels():
    k1, k2 = ncu.parse_csv((FIX / "raw_two_kernels.csv").read_text())
    assert k1.name == "triton_red_fused_rms_norm_0"
    assert (k1.duration_us, k1.dram_pct, k1.sm_pct, k1.occupancy_pct, k1.registers, k1.local_bytes) == \
        (30.0, 91.42, 23.10, 48.25, 40, 0.0)  # "30,000" nsecond -> 30 us
    assert k2.name.startswith("void at::native::vectorized_elementwise_kernel<4")  # commas inside quotes
    assert (k2.duration_us, k2.dram_pct, k2.sm_pct, k2.registers) == (10.0, 11.0, 5.5, 16)


def test_scaled_units_and_spills():
    (k,) = ncu.parse_csv((FIX / "raw_spills_scaled_units.csv").read_text())
    assert k.duration_us == pytest.approx(1250.5) and k.registers == 255
    assert k.local_bytes == pytest.approx(8000.0)  # 4.5 + 3.5 Kbyte
    assert ncu.describe(ncu.summarize([k])) == "ncu: DRAM 12%, SM 88%, occupancy 12%, 255 regs, spills 8.0 KB local"


def test_no_header_and_na_cells():
    assert ncu.parse_csv("==PROF== Connected\nhello from the candidate\n") == []
    text = (FIX / "raw_spills_scaled_units.csv").read_text().replace('"12.30"', '"n/a"')
    (k,) = ncu.parse_csv(text)
    assert k.dram_pct is None and k.sm_pct == pytest.approx(87.6)


def test_summary_weights_by_duration():
    s = ncu.summarize(ncu.parse_csv((FIX / "raw_two_kernels.csv").read_text()))
    assert s.kernels == 2 and s.duration_us == pytest.approx(40.0)
    assert s.dram_pct == pytest.approx((91.42 * 30 + 11.0 * 10) / 40)  # 71.315, not the plain mean 51.2
    assert s.sm_pct == pytest.approx((23.1 * 30 + 5.5 * 10) / 40)
    assert s.occupancy_pct == pytest.approx((48.25 * 30 + 30.0 * 10) / 40)
    assert s.registers == 40 and s.local_bytes == 0.0 and s.longest_kernel == "triton_red_fused_rms_norm_0"
    assert ncu.describe(s) == "ncu: DRAM 71%, SM 19%, occupancy 44%, 40 regs, no spills, 2 kernels"


# -- the counter rule -----------------------------------------------------------------------------------


def summary(**kw):
    base = dict(kernels=1, duration_us=100.0, dram_pct=20.0, sm_pct=20.0, occupancy_pct=50.0, registers=32,
                local_bytes=0.0)
    return {**base, **kw}


def test_counters_refine_the_class():
    assert classify_with_counters(COMPUTE, summary(dram_pct=91.0, sm_pct=23.0)) == MEMORY
    assert classify_with_counters(MEMORY, summary(dram_pct=15.0, sm_pct=85.0)) == COMPUTE
    assert classify_with_counters(MEMORY, summary(kernels=6, duration_us=100.0)) == OVERHEAD  # many kernels
    assert classify_with_counters(MEMORY, summary(kernels=1, duration_us=3.0)) == OVERHEAD  # one short kernel
    # the GPU ran kernels for 10 of the judged 40 us: launch gaps dominate, whatever the units did
    assert classify_with_counters(MEMORY, summary(dram_pct=90.0, duration_us=10.0), median_us=40.0) == OVERHEAD
    assert classify_with_counters(MEMORY, summary(dram_pct=90.0, duration_us=38.0), median_us=40.0) == MEMORY
    # neither unit busy in one long kernel (latency-bound): the roofline's class stands
    assert classify_with_counters(COMPUTE, summary()) == COMPUTE
    assert classify_with_counters(MEMORY, None) == MEMORY
    assert classify_with_counters(COMPUTE, summary(dram_pct=None, sm_pct=None)) == COMPUTE


def test_counters_match_their_row_only():
    counters = {"available": True, "shape": {"T": 7, "H": 4096}, "dtype": "bfloat16", "summary": summary()}
    row = {"shape": {"H": 4096, "T": 7}, "dtype": "bfloat16", "mode": "eager"}
    assert counters_for_row(row, counters) is counters
    assert counters_for_row({**row, "dtype": "float32"}, counters) is None
    assert counters_for_row({**row, "mode": "graph"}, counters) is None
    assert counters_for_row(row, {**counters, "available": False}) is None


# -- finding and running ncu ----------------------------------------------------------------------------


@pytest.fixture
def no_ncu(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.delenv(ncu.ENV, raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("CUDA_HOME", str(empty))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(ncu, "DEFAULT_CUDA_HOME", str(empty))
    return empty


def fake_ncu(directory: Path, body: str) -> Path:
    """An executable `ncu` that runs ``body`` (Python) with argv; it never starts the target."""
    path = directory / "ncu"
    path.write_text(f"#!{sys.executable}\nimport sys, time\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def profile_axpby(**kw):
    task = load_task(TASK)
    return ncu.profile(task, str(TUNABLE), {"BLOCK": 256}, {"N": 4096}, "float32", **kw)


def test_no_ncu_binary(no_ncu):
    assert ncu.find_ncu()[0] is None
    result = profile_axpby()
    assert result.available is False and result.permanent and "ncu not found" in result.why
    assert result.to_json() == {"source": "ncu", "note": ncu.NOTE, "available": False, "shape": {"N": 4096},
                                "dtype": "float32", "why": result.why}


def test_disabled_by_env(no_ncu, monkeypatch):
    fake_ncu(no_ncu, "sys.exit(0)")
    assert ncu.find_ncu()[0] == str(no_ncu / "ncu")  # found on PATH ...
    monkeypatch.setenv(ncu.ENV, "off")
    result = profile_axpby()  # ... but switched off
    assert not result.available and "disabled" in result.why and ncu.ENV in result.why


def test_permission_error_is_reported(no_ncu):
    fake_ncu(no_ncu, f"print(open({str(FIX / 'perm_error.txt')!r}).read()); sys.exit(1)")
    result = profile_axpby()
    assert not result.available and result.permanent
    assert "permission" in result.why and "ERR_NVGPUCTRPERM" in result.why


def test_candidate_error_and_timeout(no_ncu):
    fake_ncu(no_ncu, "print('ratchet-ncu-target: error: RuntimeError: illegal memory access', file=sys.stderr)"
                     "; sys.exit(3)")
    result = profile_axpby()
    assert not result.available and not result.permanent and result.why == "RuntimeError: illegal memory access"
    fake_ncu(no_ncu, "time.sleep(30)")
    result = profile_axpby(timeout_s=0.5)
    assert not result.available and "timed out after 0.5 s" in result.why


def test_a_profile_parses_what_ncu_logs(no_ncu, tmp_path, monkeypatch):
    # The fake writes the fixture to --log-file and its own command line beside it.
    argv_file = tmp_path / "argv.json"
    fake_ncu(no_ncu, f"import json, os, shutil\njson.dump(args + [os.environ.get('CUDA_VISIBLE_DEVICES')], "
                     f"open({str(argv_file)!r}, 'w'))\n"
                     f"shutil.copy({str(FIX / 'raw_two_kernels.csv')!r}, args[args.index('--log-file') + 1])\n"
                     "print('the candidate printed this')")
    result = profile_axpby(gpu_index=3)
    assert result.available and result.summary.kernels == 2
    assert result.summary.dram_pct == pytest.approx(71.315)
    argv = json.loads(argv_file.read_text())
    assert argv[-1] == "3"  # the judged GPU is the target's only one
    for flag in ("--csv", "--profile-from-start", "--print-units", "--log-file"):
        assert flag in argv
    assert argv[argv.index("--page") + 1] == "raw" and argv[argv.index("--profile-from-start") + 1] == "off"
    assert argv[argv.index("--metrics") + 1].split(",") == list(ncu.METRICS.values())
    target = argv[argv.index("-m") + 1:]
    assert target[0] == "ratchet.diagnose.ncu_target" and json.loads(target[target.index("--shape") + 1]) == {"N": 4096}
    stored = result.to_json()
    assert stored["source"] == "ncu" and stored["summary"]["registers"] == 40 and len(stored["kernels"]) == 2


def test_profile_judged_skips_cpu_and_failures():
    task, cand = load_task(TASK), load_candidate(TUNABLE)
    assert "CPU" in ncu.profile_judged(task, cand, {}, "pass", "cpu").why
    assert "verdict: fail" in ncu.profile_judged(task, cand, {}, "fail", "cuda").why
    assert ncu.largest_public_shape(task) == ({"N": 4096}, "float32")


# -- where the counters show ----------------------------------------------------------------------------


def stored_counters(**kw):
    return {"source": "ncu", "note": ncu.NOTE, "available": True, "shape": {"T": 7, "H": 4096}, "dtype": "bfloat16",
            "summary": summary(**{"dram_pct": 91.0, "sm_pct": 23.0, "occupancy_pct": 48.0, "registers": 40,
                                  "duration_us": 9.0, **kw}),
            "kernels": []}


def test_show_gives_counters_next_to_the_class(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    with Ledger(ledger) as led:
        run = new_run(led, device="cuda")
        attempt = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, make_verdict(speedup=1.5), "tune")
        led.set_best(run, attempt)
        assert attach_counters(led, attempt, stored_counters()) is True
        assert attach_counters(led, attempt, stored_counters(registers=99)) is False  # once per attempt
        assert led.get_attempt(attempt)["extra"]["counters"]["summary"]["registers"] == 40
    assert main(["show", run, "--ledger", ledger, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["best_bottlenecks"]
    # judged 10 us, ncu saw 9 us of kernels at 91% DRAM: memory-bound (the roofline alone: unknown here)
    assert row["class"] == MEMORY
    assert row["counters"] == "ncu: DRAM 91%, SM 23%, occupancy 48%, 40 regs, no spills"
    assert main(["show", run, "--ledger", ledger]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "memory-bound (ncu: DRAM 91%, SM 23%, occupancy 48%, 40 regs, no spills)" in out
    assert "#1 memory-bound (ncu: DRAM 91%" in out and "H=4096 T=7 bfloat16" in out  # the ledger sorts keys


def test_brief_gives_counters_next_to_the_class(tmp_path):
    from ratchet.agents.brief import build_brief

    task = load_task("rmsnorm")
    with Ledger(tmp_path / "l.sqlite") as led:
        run = new_run(led, device="cuda")
        attempt = led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, make_verdict(speedup=1.5), "tune")
        led.set_best(run, attempt)
        attach_counters(led, attempt, stored_counters())
        text = build_brief(task, led, run, "cuda")
    assert "memory-bound (ncu: DRAM 91%, SM 23%, occupancy 48%, 40 regs, no spills)" in text
    assert "Hardware counters (ncu, one profiled call on" in text


# -- when the loop profiles -----------------------------------------------------------------------------


def loop_with_fake_judge(tmp_path, monkeypatch, device: str, verdicts, counters: str = "all"):
    """A run of the tunable seed whose judge is replaced by ``verdicts`` (cycled) and whose ncu is a fake
    that records each call and the lock's state during it."""
    calls = []
    lock = DeviceLock()

    def fake_profile(task, candidate_path, config, shape, dtype, gpu_index=None, timeout_s=0, kind="ratchet"):
        calls.append({"config": dict(config), "shape": shape, "dtype": dtype, "gpu": gpu_index, "lock": lock.state()})
        return ncu.NcuResult(True, kernels=(), summary=ncu.Summary(1, 9.0, 91.0, 23.0, 48.0, 40, 0.0),
                             shape=shape, dtype=dtype)

    monkeypatch.setattr(ncu, "find_ncu", lambda: ("/fake/ncu", ""))
    monkeypatch.setattr(ncu, "profile", fake_profile)
    task, cand = load_task(TASK), load_candidate(TUNABLE)
    led = Ledger(tmp_path / f"{device}.sqlite")
    run = led.create_run(task="axpby", task_path=TASK, device=device, device_name="fake", proposer="tune",
                         budget_attempts=4)
    options = [JudgeOptions(device=device, gpu_index=1 if device == "cuda" else None,
                            device_lock=lock if device == "cuda" else None)]
    loop = Loop(led, run, task, TuneProposer([cand], sampler="grid"), RunLimits(budget_attempts=4), options,
                candidates=[cand], counters=counters)
    kinds = iter(verdicts * 4)

    def judge(proposal, opts):
        rng = random.Random(str(proposal.config))
        times = [10.0 * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(20)]
        return {"verdict": next(kinds), "reasons": [], "speedup": 1.2, "judge_wall_s": 0.01,
                "shapes": [{"shape": {"N": 4096}, "dtype": "float32", "weight": 1.0, "held_out": False,
                            "times_us": times, "ref_times_us": [12.0] * 20, "median_us": 10.0}]}

    loop._judge = judge
    loop.run()
    return calls, led.attempts(run)


def test_loop_profiles_passing_gpu_attempts_only(tmp_path, monkeypatch):
    calls, attempts = loop_with_fake_judge(tmp_path, monkeypatch, "cuda", ["pass", "fail"])
    passed = [a for a in attempts if a["verdict"] == "pass"]
    assert len(attempts) == 4 and len(passed) == 2 and len(calls) == 2
    assert [c["config"] for c in calls] == [a["config"] for a in passed]
    assert all(c["shape"] == {"N": 4096} and c["dtype"] == "float32" and c["gpu"] == 1 for c in calls)
    assert all(c["lock"] == (0, True, 0) for c in calls)  # held exclusively: nothing timed beside it
    for a in attempts:
        stored = a["extra"].get("counters")
        if a["verdict"] == "pass":
            assert stored["source"] == "ncu" and stored["summary"]["dram_pct"] == 91.0
        else:
            assert stored is None


def test_loop_profiles_only_kept_attempts_by_default(tmp_path, monkeypatch):
    calls, attempts = loop_with_fake_judge(tmp_path, monkeypatch, "cuda", ["pass"], counters="kept")
    kept = [a for a in attempts if a["kept"]]
    assert len(attempts) == 4 and all(a["verdict"] == "pass" for a in attempts)
    assert 1 <= len(kept) < len(attempts)  # equal times: the first is kept, ties are not
    assert [c["config"] for c in calls] == [a["config"] for a in kept]
    assert [a["id"] for a in attempts if "counters" in a["extra"]] == [a["id"] for a in kept]


def test_loop_rejects_an_unknown_counters_policy(tmp_path):
    task, cand = load_task(TASK), load_candidate(TUNABLE)
    with Ledger(tmp_path / "x.sqlite") as led:
        run = led.create_run(task="axpby", task_path=TASK, device="cuda", device_name="fake", proposer="tune")
        with pytest.raises(ValueError, match="counters must be"):
            Loop(led, run, task, TuneProposer([cand]), RunLimits(budget_attempts=1), [JudgeOptions(device="cuda")],
                 candidates=[cand], counters="sometimes")


def test_loop_never_profiles_on_the_cpu(tmp_path, monkeypatch):
    calls, attempts = loop_with_fake_judge(tmp_path, monkeypatch, "cpu", ["pass"])
    assert len(attempts) == 4 and all(a["verdict"] == "pass" for a in attempts)
    assert calls == [] and all("counters" not in a["extra"] for a in attempts)


def test_loop_stops_profiling_when_ncu_is_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv(ncu.ENV, "off")
    real_find = ncu.find_ncu
    calls = []
    monkeypatch.setattr(ncu, "profile", lambda *a, **k: calls.append(a))
    task, cand = load_task(TASK), load_candidate(TUNABLE)
    with Ledger(tmp_path / "off.sqlite") as led:
        run = led.create_run(task="axpby", task_path=TASK, device="cuda", device_name="fake", proposer="tune")
        loop = Loop(led, run, task, TuneProposer([cand], sampler="grid"), RunLimits(budget_attempts=2),
                    [JudgeOptions(device="cuda")], candidates=[cand])
        loop._judge = lambda proposal, opts: {"verdict": "pass", "reasons": [], "speedup": 1.0, "judge_wall_s": 0.0,
                                              "shapes": []}
        loop.run()
        assert calls == [] and "disabled" in loop.counters_off and real_find()[0] is None


def test_eval_ncu_on_the_cpu_says_why_not(capsys):
    code = main(["eval", TASK, str(TUNABLE), "--device", "cpu", "--json", "--ncu", "--no-timing"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass"
    assert out["counters"]["source"] == "ncu" and out["counters"]["available"] is False
    assert "judged on the CPU" in out["counters"]["why"]


# -- on a GPU: the real ncu ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_ncu_profiles_the_rmsnorm_seed():
    # The metric names, the raw CSV layout and the profiled range are checked here for real. Where ncu is
    # missing or the counters are not permitted, the test says why instead of passing silently.
    binary, why = ncu.find_ncu()
    if binary is None:
        pytest.skip(f"no ncu on this machine: {why}")
    task = load_task("rmsnorm")
    seed = BUILTIN_TASKS_DIR / "rmsnorm" / "seeds" / "triton_rowwise.py"
    result = ncu.profile(task, str(seed), {}, {"T": 4096, "H": 4096}, "bfloat16", timeout_s=120)
    if result.permanent:
        pytest.skip(f"ncu cannot read counters here: {result.why}")
    assert result.available, result.why
    s = result.summary
    assert s.kernels >= 1 and not s.capped
    assert 0 < s.duration_us < 1000  # one call of a ~21 us kernel, measured under ncu's replay
    assert 50 <= s.dram_pct <= 100  # a copy-like kernel: DRAM-bound
    assert 0 <= s.sm_pct <= 100 and 0 < s.occupancy_pct <= 100 and s.registers > 0
