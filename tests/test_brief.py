"""The brief (`ratchet context`): what it holds, in what order, its size bound on a long history, the CLI."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest

from ratchet.agents.brief import DEFAULT_MAX_CHARS, BriefError, build_brief
from ratchet.cli import main
from ratchet.judge.verdict import ERROR_CODES, FAIL_CODES, Reason
from ratchet.run.ledger import Ledger
from ratchet.task import load_task
from one_line_refusal import run_cli
from test_ledger import make_verdict, new_run

ORDER = ["## Goal", "## Hardware", "## Task", "## Best candidate", "## History", "## Pending ideas", "## Rules"]
BEST_SOURCE = (
    '"""Two rows per program, fp32 sums in registers."""\n\nSPACE = {"ROWS": [2, 1, 4]}\n\n\n'
    "def kernel(x, weight, eps, ROWS=2):\n    return best_marker_rows(x, weight, eps, ROWS)  # the best's body\n"
)
PENDING, DROPPED = "split the row across programs at T=1", "a lookup table for rsqrt"
# What judged the run's attempts: the brief names the newest (an agent elsewhere cannot see the GPU side's)
OLD_SOFTWARE = {"torch": "2.10.0+cu128", "triton": "3.5.1", "cuda": "12.8"}
SOFTWARE = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No measured ceilings unless a test writes some; no ledger from the environment."""
    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RATCHET_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def rmsnorm():
    return load_task("rmsnorm")


def sections(brief: str) -> dict[str, str]:
    """The brief's sections by heading, each with its text up to the next heading of its level."""
    out = {}
    for part in brief.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = body
    return out


def cuda_ledger(path) -> tuple[Ledger, str]:
    """An rmsnorm run judged on an H200: a first best, a mutating cheat, a compile error, a faster best,
    and a pass that never beat the best; one pending, one dropped and one tried idea."""
    led = Ledger(path)
    run = new_run(led, device="cuda", device_name="NVIDIA H200", goal_speedup=3.0)
    tried = led.add_idea("rmsnorm", "vectorized loads of 16 bytes")
    led.add_idea("rmsnorm", PENDING)
    led.set_idea_status(led.add_idea("rmsnorm", DROPPED), "dropped")
    first = led.record_attempt(run, "seeds/triton_rowwise.py", "def kernel(x, weight, eps):\n    return x\n",
                               {"BLOCK": 128}, {**make_verdict(speedup=1.5), "software": OLD_SOFTWARE}, "tune")
    led.set_best(run, first)
    led.record_attempt(run, "llm/cheat.py", "def kernel(x, weight, eps):\n    x.zero_()\n", {},
                       make_verdict("fail", None, [Reason("input_mutated", "x changed at row 3 after the call")]), "llm")
    led.record_attempt(run, "llm/broken.py", "def kernel(x, weight, eps):\n    tl.bad()\n", {},
                       make_verdict("error", None, [Reason("compile_error", "triton: unsupported op tl.bad")]), "llm")
    best = led.record_attempt(run, "llm/two_rows.py", BEST_SOURCE, {"ROWS": 2}, make_verdict(speedup=2.25), "llm",
                              idea_id=tried)
    led.set_best(run, best)
    led.record_attempt(run, "llm/slow.py", "def kernel(x, weight, eps):\n    return slow(x)\n", {},
                       {**make_verdict(speedup=1.1), "software": SOFTWARE}, "llm")
    return led, run


def test_brief_holds_what_an_agent_needs(tmp_path, rmsnorm):
    led, run = cuda_ledger(tmp_path / "l.sqlite")
    with led:
        brief = build_brief(rmsnorm, led, run)
    parts = sections(brief)
    assert [h for h in ORDER if h in brief] == ORDER
    assert [brief.index(h) for h in ORDER] == sorted(brief.index(h) for h in ORDER)  # priority order
    goal, task, best, history = parts["Goal"], parts["Task"], parts["Best candidate"], parts["History"]
    # The goal: the speedup to beat, the run's target, per-shape floors from the datasheet (nothing cached).
    assert "**2.250x**" in goal and "Run target: 3x" in goal and "`kernel(x, weight, eps)`" in goal
    assert "datasheet numbers for H200" in goal and "not measured" in goal
    for shape in ("T=1 H=4096", "T=4096 H=8192", "T=16384 H=8192"):
        assert f"| {shape} |" in goal
    assert "| T=16384 H=8192 | 0.5 | 112 |" in goal  # 536,887,296 bytes at 4.8 TB/s; weight 0.5 (prefill)
    assert "memory-bound" in goal and "ridge point" in goal
    assert "The run's judge: torch 2.11.0+cu130, triton 3.6.0, cuda 13.0." in parts["Hardware"]
    assert "2.10.0" not in brief
    # The task: its reference and cost model as written in the task file.
    assert inspect.getsource(rmsnorm.reference) in task and "def cost(shape, dtype):" in task
    assert "H in [4096, 5120, 7168, 8192, 2880, 3003]" in task
    # The best: source, speedup, config, per-shape figures with their class (10 µs against a 0.03 µs floor).
    assert BEST_SOURCE.strip() in best and "**2.250x**" in best and '`{"ROWS":2}`' in best
    assert "| T=7 H=4096 | bf16 | eager | 10.0 | 15.0 | 2.250x | 0.0256 | 0.26% |" in best and "overhead-bound" in best
    assert 'SPACE = {"ROWS": [2, 1, 4]}' in best and "Best over time: #1 1.50x → #4 2.25x" in best
    # History: why things failed, dead ends, the idea tried.
    assert "input_mutated: x changed at row 3 after the call" in history
    assert "compile_error ×1" in history and "input_mutated ×1" in history
    assert "slow.py" in history and "never beat the best (2.25x)" in history
    assert "vectorized loads of 16 bytes → 1 attempt, 1 passed, best 2.25x, kept" in history
    # Ideas: the pending one, never the dropped one.
    assert PENDING in parts["Pending ideas"] and DROPPED not in brief
    # Rules: forbidden ops and every refusal code with its one-line reason, from verdict.py.
    rules = parts["Rules"]
    assert "`aten::rms_norm`, `aten::_fused_rms_norm`" in rules and "CONSTRAINTS" in rules
    # Compiled candidates learn what a config costs them: a define is a build of its own.
    assert "`ratchet.cuda_build.load_cached`" in rules and "as a define is a build of its own" in rules
    for code, why in {**FAIL_CODES, **ERROR_CODES}.items():
        assert f"- `{code}`: {why}" in rules


def test_measured_ceilings_give_the_floors(tmp_path, rmsnorm):
    cache = tmp_path / "cache" / "ceilings.json"
    cache.parent.mkdir()
    from dataclasses import asdict

    from ratchet.hardware.ceilings import Ceilings

    when = time.time() - 86400  # a day old: within the cache's 7 days
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    entry = Ceilings("NVIDIA H200", "570.1", 4.0, 700.0, measured_at, "2 GiB copy", torch_version="2.13",
                     host="gpu-host", measured_unix=when)
    cache.write_text(json.dumps({entry.key: asdict(entry)}))
    led, run = cuda_ledger(tmp_path / "l.sqlite")
    with led:
        brief = build_brief(rmsnorm, led, run)
    goal = sections(brief)["Goal"]
    assert "measured ceilings of NVIDIA H200" in goal and "datasheet numbers" not in goal
    assert "| T=16384 H=8192 | 0.5 | 134 |" in goal  # 536,887,296 bytes at 4.0 TB/s
    assert "ridge point (matmul rate / copy bandwidth = 175 FLOP/B)" in goal
    assert f"Measured ceilings (cached, {measured_at}): copy 4 TB/s" in sections(brief)["Hardware"]


def test_no_history_shows_the_seeds(rmsnorm):
    brief = build_brief(rmsnorm, None, device="cpu")
    parts = sections(brief)
    assert [brief.index(h) for h in ORDER] == sorted(brief.index(h) for h in ORDER)
    assert "No history yet" in brief and "**cpu**" in parts["Goal"]
    assert "CPU: no measured ceilings cached" in parts["Goal"] and "CPU times say nothing about GPU" in parts["Hardware"]
    cpu_seed = next(p for p in rmsnorm.seeds() if p.name == "cpu_torch.py")
    assert cpu_seed.read_text().strip() in parts["Best candidate"]
    assert "### Seed `triton_rowwise.py`" not in brief and "triton_rowwise.py" in parts["Best candidate"]
    assert "| T=64 H=1000 |" in parts["Goal"] and "| T=4096 H=8192 |" not in brief  # the CPU shape set
    assert "Nothing tried yet" in parts["History"]


def test_the_seeds_helper_module_is_shown_once_beside_the_seeds_that_import_it():
    rope = load_task("rope")
    (helper,) = Path(rope.seeds_dir).glob("_*.py")
    best = sections(build_brief(rope, None, device="cuda"))["Best candidate"]
    assert "### Seed `triton_rope.py`" in best and "### Seed `triton_heads_split.py`" in best
    assert best.count(f"### `{helper.name}`, which the seeds above import") == 1
    assert "def rotate_heads(" in best and f"### Seed `{helper.name}`" not in best  # a helper, never a seed
    cpu = sections(build_brief(rope, None, device="cpu"))["Best candidate"]
    assert helper.name not in cpu  # the CPU seed imports nothing of it


def test_run_choice_most_recent_or_named(tmp_path, rmsnorm):
    with Ledger(tmp_path / "l.sqlite") as led:
        old = new_run(led)
        led.set_best(old, led.record_attempt(old, "a.py", "def kernel(x, weight, eps):\n    return 1\n", {},
                                             make_verdict(speedup=1.5), "tune"))
        new = new_run(led)
        led.set_best(new, led.record_attempt(new, "b.py", "def kernel(x, weight, eps):\n    return 2\n", {},
                                             make_verdict(speedup=2.75), "tune"))
        assert f"History from run {new}" in build_brief(rmsnorm, led) and "**2.750x**" in build_brief(rmsnorm, led)
        named = build_brief(rmsnorm, led, old)
        assert f"History from run {old}" in named and "**1.500x**" in named and "2.750x" not in named
        assert "No history yet" in build_brief(rmsnorm, led, device="cuda")  # both runs were on the CPU
        softmax_run = new_run(led, task="softmax")
        with pytest.raises(BriefError, match="is a run of task 'softmax'"):
            build_brief(rmsnorm, led, softmax_run)
        with pytest.raises(BriefError, match="judged on cpu, not cuda"):
            build_brief(rmsnorm, led, old, device="cuda")
        with pytest.raises(BriefError, match="positive"):
            build_brief(rmsnorm, led, max_chars=0)


def long_history(path, attempts: int = 500) -> tuple[Ledger, str]:
    """A run of `attempts` attempts over 100 long candidates (5 configs each), failures with long details,
    and a best that changes ten times; the final best's source is ~60 KB."""
    led = Ledger(path)
    run = new_run(led, device="cuda", device_name="NVIDIA H200")
    codes = ["wrong_output", "compile_error", "timeout", "shape_unsupported"]
    best_at = set(range(25, attempts + 1, attempts // 10))
    for seq in range(1, attempts + 1):
        cand = (seq - 1) // 5
        body = "".join(f"    acc_{i} = tl.load(x_ptr + {i} * BLOCK + offs, mask=mask)  # candidate {cand}\n"
                       for i in range(60 if seq not in best_at else 800))
        source = f'"""candidate {cand}{" best " + str(seq) if seq in best_at else ""}"""\n\n' \
                 f"def helper():\n{body}\n\ndef kernel(x, weight, eps, BLOCK=256):\n    return helper()\n"
        if seq in best_at:
            verdict = make_verdict(speedup=1.0 + seq / 100)
        elif seq % 3 == 0:
            verdict = make_verdict(speedup=0.9)
        else:
            code = codes[seq % len(codes)]
            verdict = make_verdict("fail" if code in FAIL_CODES else "error", None,
                                   [Reason(code, f"attempt {seq}: " + "a long explanation " * 40)])
        aid = led.record_attempt(run, f"llm/cand_{cand}.py", source, {"BLOCK": 256 * (1 + seq % 5)}, verdict, "llm")
        if seq in best_at:
            led.set_best(run, aid)
    return led, run


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    led, run = long_history(tmp_path_factory.mktemp("long") / "l.sqlite")
    yield led, run
    led.close()


@pytest.mark.parametrize("bound", [DEFAULT_MAX_CHARS, 12000])
def test_size_bound_holds_on_a_long_history(long_run, rmsnorm, bound):
    led, run = long_run
    best = led.best(run)
    brief = build_brief(rmsnorm, led, run, max_chars=bound)
    assert len(brief) <= bound
    assert "[brief cut at" not in brief  # the floors fit: trimming, not cutting, did it
    parts = sections(brief)
    assert [brief.index(h) for h in ORDER] == sorted(brief.index(h) for h in ORDER)
    assert f"**{best['speedup']:.3f}x**" in parts["Goal"] and "| T=4096 H=8192 |" in parts["Goal"]
    essentials = parts["Best candidate"]
    assert f"Attempt #{best['seq']} of run {run}" in essentials and '`{"BLOCK":256}`' in essentials
    assert "def kernel(x, weight, eps, BLOCK=256):" in essentials and "lines cut to bound the brief" in essentials
    assert "`aten::rms_norm`" in parts["Rules"] and all(f"`{code}`" in parts["Rules"] for code in FAIL_CODES)
    history = parts["History"]
    assert "500 attempts" in history and "Why attempts failed" in history
    if bound == DEFAULT_MAX_CHARS:  # room for detail: the newest dead end is listed, old ones summarized
        assert "cand_99.py" in history and "older dead ends left out" in history


def test_cli_prints_and_writes_the_brief(tmp_path, capsys, rmsnorm):
    ledger = str(tmp_path / "l.sqlite")
    led, run = cuda_ledger(ledger)
    with led:
        expected = build_brief(rmsnorm, led, run, max_chars=9000)
    code, out, err = run_cli(capsys, "context", "rmsnorm", "--ledger", ledger, "--run", run, "--max-chars", "9000")
    assert (code, out, err) == (0, expected, "")
    code, out, _ = run_cli(capsys, "context", "rmsnorm", "--ledger", ledger, "--max-chars", "9000",
                           "-o", str(tmp_path / "out" / "brief.md"))
    assert code == 0 and out.startswith("wrote ") and (tmp_path / "out" / "brief.md").read_text() == expected
    missing = tmp_path / "none.sqlite"
    code, out, _ = run_cli(capsys, "context", "rmsnorm", "--ledger", str(missing), "--device", "cpu")
    assert code == 0 and "No history yet" in out and not missing.exists()  # reading never creates a ledger
    with pytest.raises(SystemExit) as info:
        main(["context", "--help"])
    assert info.value.code == 0 and "--max-chars" in capsys.readouterr().out


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    led, run = cuda_ledger(ledger)
    with led:
        softmax_run = new_run(led, task="softmax")
    for argv in (("no_such_task",), ("rmsnorm", "--run", "rdeadbeef"), ("rmsnorm", "--run", softmax_run),
                 ("rmsnorm", "--run", run, "--device", "cpu"), ("rmsnorm", "--max-chars", "0"),
                 ("rmsnorm", "--max-chars", "-5"), ("rmsnorm", "--max-chars", "many"),
                 ("rmsnorm", "--run", run, "--ledger", str(tmp_path / "none.sqlite"))):
        if "--ledger" not in argv:
            argv = (*argv, "--ledger", ledger)
        code, out, err = run_cli(capsys, "context", *argv)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("ratchet: error:"), (argv, err)


def test_the_brief_says_in_which_dtype_the_judge_runs_the_reference(rmsnorm):
    """Upcast to the task's reference dtype, or at the task's own dtype (a module that chooses on its
    values, an MoE router's top-k, is its own reference): the brief had said float64 for every task."""
    import dataclasses

    import torch

    assert "Reference (the judge runs it in fp64, on the inputs upcast to it," in build_brief(rmsnorm, None, device="cpu")
    own = dataclasses.replace(rmsnorm, dtypes=(torch.bfloat16,), reference_dtype=torch.bfloat16)
    brief = build_brief(own, None, device="cpu")
    assert "Reference (the judge runs it at the task's own dtype, not upcast," in brief and "fp64" not in brief


def test_a_failed_attempt_in_the_history_says_where_it_was_right_before_it_failed(tmp_path, rmsnorm):
    from ratchet.judge.verdict import ShapeResult, Verdict

    led = Ledger(tmp_path / "l.sqlite")
    run = new_run(led, device="cuda", device_name="NVIDIA H200")
    shapes = [ShapeResult(shape={"T": 1, "H": 4096}, dtype="bfloat16"),
              ShapeResult(shape={"T": 9, "H": 2048}, dtype="bfloat16", held_out=True, correct=False)]
    failed = Verdict("fail", [Reason("wrong_output", "held-out shape {'T': 9, 'H': 2048} bfloat16 output 0: "
                                                     "4 of 18432 elements beyond atol")], shapes=shapes,
                     task="rmsnorm", candidate="v2.py", device="cuda", device_name="NVIDIA H200")
    led.record_attempt(run, "agent/v2.py", "def kernel(x, weight, eps):\n    return x\n", {},
                       failed.to_json(with_times=True), "agent")
    with led:
        history = sections(build_brief(rmsnorm, led, run))["History"]
    line = next(line for line in history.splitlines() if "wrong_output" in line and "#1" in line)
    assert line.endswith("; right before it at H=4096 T=1 bfloat16"), line  # the ledger sorts keys


def test_commands_in_the_brief_name_a_ledger_that_is_not_the_default_and_a_cut_source_says_how_to_get_it(
        tmp_path, rmsnorm):
    long_source = "\n".join([f"# line {i}: the best's own comment" for i in range(400)]
                            + ["def kernel(x, weight, eps):", "    return x"])
    led = Ledger(tmp_path / "elsewhere.sqlite")
    run = new_run(led)
    best = led.record_attempt(run, "agent/long.py", long_source, {}, make_verdict(speedup=1.5), "agent")
    led.set_best(run, best)
    with led:
        brief = build_brief(rmsnorm, led, run, max_chars=12_000)
    where = f" --ledger {tmp_path / 'elsewhere.sqlite'}"
    assert f"`ratchet best {run} -o FILE{where}` writes the whole file" in sections(brief)["Best candidate"]
    assert f'`ratchet idea add rmsnorm "..."{where}` records one.' in brief
    default = Ledger(tmp_path / ".ratchet" / "ledger.sqlite")  # where commands look from tmp_path (isolated)
    new_run(default)
    with default:
        brief = build_brief(rmsnorm, default)
    assert '`ratchet idea add rmsnorm "..."` records one.' in brief and "--ledger" not in sections(brief)["Pending ideas"]


def test_a_task_reached_through_a_symlink_is_named_by_the_users_path(tmp_path):
    """The brief's task file and its commands use the path the user gave, not the symlink's target."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "axpby.py").write_text((Path(__file__).parent / "data" / "tasks" / "axpby.py").read_text())
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    task = load_task(str(tmp_path / "linked" / "axpby.py"))
    assert task.source_path == str(tmp_path / "linked" / "axpby.py")
    brief = build_brief(task, device="cpu")
    assert f"- Task file: {tmp_path / 'linked' / 'axpby.py'}" in brief and str(real) not in brief
