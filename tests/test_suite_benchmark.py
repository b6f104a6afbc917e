"""benchmarks/suite.py: a small CPU suite through the real judge, and the table logic on made-up verdicts.

The CPU run judges torch.compile of rmsnorm's reference (passes) and a wrong kernel given as the
"best" column (tests/redteam/cheats/p15_ignore_weight.py, wrong_output), on two shapes.
"""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ratchet.task import load_task

ROOT = Path(__file__).parent.parent
WRONG = ROOT / "tests" / "redteam" / "cheats" / "p15_ignore_weight.py"
COLUMNS = ("eager", "torch_compile", "liger", "best", "roofline")

from benchmarks import suite_table


def run_suite(out: Path, *extra: str, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.suite", "--device", "cpu", "--tasks", "rmsnorm", "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def num(text: str) -> float | None:
    return float(text) if text != "" else None


@pytest.mark.slow
def test_cpu_suite_judges_every_column_and_quotes_no_failing_time(tmp_path):
    # dynamic "auto": two compiles instead of one per shape keeps this test short on two cores.
    proc = run_suite(tmp_path, "--shapes", "2", "--peers", "torch_compile", "best", "--compile-dynamic", "auto",
                     "--best", f"rmsnorm={WRONG}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rmsnorm bfloat16 torch_compile: pass" in proc.stdout  # progress line per evaluation
    assert "rmsnorm bfloat16 best: fail: wrong_output" in proc.stdout

    task = load_task("rmsnorm")
    shapes = [dict(s) for s in task.cpu.public[:2]]
    with (tmp_path / "suite.csv").open() as f:
        rows = list(csv.DictReader(f))
    by = {(json.loads(r["shape_json"])["T"], json.loads(r["shape_json"])["H"], r["column"]): r for r in rows}
    assert len(rows) == len(shapes) * len(COLUMNS) == len(by)

    data = json.loads((tmp_path / "suite.json").read_text())
    assert data["meta"]["graph_below_us"] == 50.0  # the judge's bound unless --graph-below says otherwise
    assert "used when the reference is under 50 µs" in (tmp_path / "suite.md").read_text()
    (result,) = data["results"]
    assert result["task"] == "rmsnorm" and result["dtype"] == "bfloat16" and result["public"] == shapes
    compiled = result["evaluations"]["torch_compile"]["verdict"]
    assert compiled["verdict"] == "pass"
    wrong = result["evaluations"]["best"]["verdict"]
    assert wrong["verdict"] == "fail" and "wrong_output" in {r["code"] for r in wrong["reasons"]}

    for shape in shapes:
        key = (shape["T"], shape["H"])
        eager, tc, liger, best, roof = (by[key + (c,)] for c in COLUMNS)
        # eager is the judge's interleaved reference timing from the torch.compile evaluation
        (vrow,) = [r for r in compiled["shapes"] if r["shape"] == shape and not r["held_out"]]
        assert eager["status"] == "pass" and eager["source"] == "torch_compile"
        assert num(eager["median_us"]) == pytest.approx(vrow["ref_median_us"], rel=1e-12)
        assert num(tc["median_us"]) == pytest.approx(vrow["median_us"], rel=1e-12)
        assert num(tc["judge_speedup"]) == pytest.approx(vrow["speedup"], rel=1e-12)
        e_us, tc_us, floor = num(eager["median_us"]), num(tc["median_us"]), num(roof["median_us"])
        assert e_us > 0 and tc_us > 0 and floor > 0
        cost = task.shape_cost(shape, torch.bfloat16)
        for cell in (eager, tc, roof):
            us = num(cell["median_us"])
            assert num(cell["speedup_vs_eager"]) == pytest.approx(e_us / us, rel=1e-9)
            assert num(cell["speedup_vs_compile"]) == pytest.approx(tc_us / us, rel=1e-9)
            assert num(cell["tbps"]) == pytest.approx(cost.bytes / us / 1e6, rel=1e-9)
            assert num(cell["roofline_fraction"]) == pytest.approx(floor / us, rel=1e-9)
            assert num(cell["floor_us"]) == pytest.approx(floor, rel=1e-12)
        assert roof["status"] == "floor" and num(roof["roofline_fraction"]) == 1.0
        # a failing verdict: its reason code, and no number of it
        assert best["status"] == "fail" and best["reason"] == "wrong_output"
        for field in ("median_us", "iqr_us", "tbps", "roofline_fraction", "speedup_vs_eager",
                      "speedup_vs_compile", "judge_speedup"):
            assert best[field] == ""
        assert liger["status"] == "not_run" and liger["median_us"] == ""
        winners = [c for c in COLUMNS if by[key + (c,)]["winner"] == "1"]
        assert len(winners) == 1 and winners[0] in ("eager", "torch_compile")
        assert num(by[key + (winners[0],)]["median_us"]) == min(e_us, tc_us)

    md = (tmp_path / "suite.md").read_text()
    assert "python -m benchmarks.suite --device cpu --tasks rmsnorm" in md and "torch 2." in md
    table = [line for line in md.splitlines() if line.startswith("| rmsnorm |")]
    assert len(table) == len(shapes)
    for line in table:
        best_cell = line.split(" | ")[8]
        assert best_cell == "fail: wrong_output" and not any(ch.isdigit() for ch in best_cell)
    assert "CPU times" in md


@pytest.mark.slow
def test_time_budget_skips_and_says_so(tmp_path):
    proc = run_suite(tmp_path, "--shapes", "1", "--peers", "torch_compile", "--time-budget", "0.001", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "suite.csv").open()))
    tc = [r for r in rows if r["column"] == "torch_compile"]
    assert tc and all(r["status"] == "skipped" and r["reason"].startswith("time budget") for r in tc)
    assert all(r["median_us"] == "" for r in rows if r["column"] != "roofline")
    assert "skipped: time budget" in (tmp_path / "suite.md").read_text()


# -- the table logic alone, on made-up verdicts ----------------------------------------------------


def _verdict(rows):
    return {"verdict": "pass", "speedup": 1.0, "notes": [], "shapes": [
        dict(shape=s, held_out=False, mode=m, median_us=us, iqr_us=0.1, ref_median_us=ref, ref_iqr_us=0.1,
             speedup=ref / us, eager_median_us=eager_us) for s, m, us, ref, eager_us in rows]}


def _record(status, verdict=None, public=(), reason="", limits=None):
    return {"status": status, "reason": reason, "detail": "", "candidate": "x.py", "note": "",
            "public": list(public), "verdict": verdict, "wall_s": 1.0, **({"limits": limits} if limits else {})}


def test_table_modes_limits_and_speedups():
    small, wide = {"M": 64, "N": 1024}, {"M": 1, "N": 128256}
    result = {
        "task": "softmax", "dtype": "float32", "public": [small, wide],
        "costs": [{"bytes": 2e6, "flops": 0.0, "floor_us": 0.5}, {"bytes": 1e6, "flops": 0.0, "floor_us": 0.25}],
        "evaluations": {
            # graph mode on both shapes in the torch.compile evaluation
            "torch_compile": _record("pass", _verdict([(small, "graph", 4.0, 8.0, 9.0),
                                                       (wide, "graph", 5.0, 6.0, 7.0)]), [small, wide]),
            # Liger judged only within N <= 65536; its small shape came out eager there (reference >= 50 us)
            "liger": _record("pass", _verdict([(small, "eager", 3.0, 60.0, 3.0)]), [small], limits={"N": 65536}),
            "best": _record("error", reason="timeout"),
        },
    }
    rows = suite_table.table_rows([result], datasheet_tbps=0.4)
    first, second = rows
    assert first["mode"] == "graph" and first["cells"]["eager"]["median_us"] == 8.0
    tc = first["cells"]["torch_compile"]
    assert tc["speedup_vs_eager"] == 2.0 and tc["speedup_vs_compile"] == 1.0
    assert tc["tbps"] == pytest.approx(2e6 / 4.0 / 1e6) and tc["above_datasheet"] is True
    liger = first["cells"]["liger"]  # eager time in a graph row: quoted, but no speedup across modes
    assert liger["mode"] == "eager" and liger["speedup_vs_eager"] is None and liger["speedup_vs_compile"] is None
    assert first["winner"] == "torch_compile"  # the faster Liger time is in another mode
    assert second["cells"]["liger"]["status"] == "n/a" and second["cells"]["liger"]["median_us"] is None
    assert first["cells"]["best"]["status"] == "error" and first["cells"]["best"]["median_us"] is None
    assert second["cells"]["roofline"]["speedup_vs_eager"] == pytest.approx(6.0 / 0.25)
    text = suite_table.cell_text("liger", liger, first["mode"])
    assert "(eager)" in text and "–" in text
    assert suite_table.cell_text("best", first["cells"]["best"], "graph") == "error: timeout"
    assert all(math.isfinite(c["median_us"]) for r in rows for c in r["cells"].values() if c["median_us"])


def test_eager_row_quotes_a_graph_peer_at_its_eager_time():
    shape = {"T": 4096, "H": 8192}
    result = {"task": "rmsnorm", "dtype": "bfloat16", "public": [shape],
              "costs": [{"bytes": 1e8, "flops": 0.0, "floor_us": 20.0}],
              "evaluations": {"torch_compile": _record("pass", _verdict([(shape, "eager", 40.0, 80.0, 40.0)]), [shape]),
                              "best": _record("pass", _verdict([(shape, "graph", 25.0, 49.0, 30.0)]), [shape])}}
    (row,) = suite_table.table_rows([result])
    best = row["cells"]["best"]
    assert row["mode"] == "eager" and best["mode"] == "eager" and best["median_us"] == 30.0
    assert best["speedup_vs_eager"] == pytest.approx(80.0 / 30.0)
    assert best["speedup_vs_compile"] == pytest.approx(40.0 / 30.0)
    assert row["winner"] == "best" and row["cells"]["liger"]["status"] == "not_run"


def test_largest_keeps_the_shapes_that_move_the_most_bytes_in_task_order():
    # The copy-ceiling goal is about each task's largest shapes: --largest N picks them by the task's cost
    # model (GPU shapes of rmsnorm at bf16), in the order the task lists them.
    from benchmarks import suite

    task = load_task("rmsnorm")
    public = task.shape_set("cuda").public
    bytes_of = {json.dumps(s, sort_keys=True): task.cost(s, torch.bfloat16).bytes for s in public}
    view = suite.restrict(task, "cuda", torch.bfloat16, None, largest=2)
    picked = view.shape_set("cuda").public
    assert len(picked) == 2
    rest = [b for k, b in bytes_of.items() if k not in {json.dumps(s, sort_keys=True) for s in picked}]
    assert min(bytes_of[json.dumps(s, sort_keys=True)] for s in picked) >= max(rest)
    assert [public.index(s) for s in picked] == sorted(public.index(s) for s in picked)
    first_two = suite.restrict(task, "cuda", torch.bfloat16, 2).shape_set("cuda").public
    assert first_two == [dict(s) for s in public[:2]] and first_two != picked
    assert view.dtypes == (torch.bfloat16,)


@pytest.mark.parametrize("flag", ["--shapes", "--largest"])
def test_a_shape_count_under_one_is_one_usage_line(tmp_path, flag):
    proc = run_suite(tmp_path, flag, "0", timeout=60)
    assert proc.returncode == 2
    assert f"argument {flag}: invalid positive_int value: '0'" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "suite.json").exists()
