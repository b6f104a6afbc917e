"""Rich output readable anywhere: a verdict's table piped to a file, or on a narrow terminal, shows every figure
whole (no "…"), and the figures are the verdict's own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.report.console import print_run, print_verdict
from ratchet.report.terminal import make_console
from ratchet.task import load_task

SEED = Path(__file__).parent.parent / "src" / "ratchet" / "tasks" / "rmsnorm" / "seeds" / "cpu_torch.py"


@pytest.fixture(scope="module")
def verdict():
    # The table is what matters here, not the verdict: a loaded machine may fail the outside clock's check,
    # and the timed rows are shown all the same.
    verdict = evaluate(load_task("rmsnorm"), load_candidate(SEED), None, JudgeOptions(device="cpu"))
    assert verdict.verdict in ("pass", "fail"), verdict.reasons
    return verdict


def _shape_text(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def assert_every_figure_whole(text: str, verdict_json: dict) -> None:
    assert "…" not in text and "..." not in text
    timed = [s for s in verdict_json["shapes"] if s["median_us"] is not None]
    assert len(timed) >= 2
    for s in timed:
        # One line per shape holds its shape, its times and its speedup as the JSON has them.
        key = [_shape_text(s["shape"]), s["dtype"], s["mode"]]
        line = next(line for line in text.splitlines() if [c.strip() for c in line.split("│")[1:4]] == key)
        for figure in (f"{s['median_us']:.2f}", f"{s['iqr_us']:.2f}", f"{s['ref_median_us']:.2f}",
                       *([f"{s['speedup']:.3f}"] if s["speedup"] is not None else [])):
            assert figure in line, (figure, line)
    if verdict_json["speedup"] is not None:
        assert f"{verdict_json['speedup']:.3f}x" in text


@pytest.mark.parametrize("columns", [None, "40"])
def test_a_verdict_written_to_a_pipe_shows_every_figure_of_its_json(verdict, monkeypatch, columns):
    if columns:
        monkeypatch.setenv("COLUMNS", columns)  # Rich would squeeze a pipe to this width
    out = io.StringIO()
    console = make_console(file=out)
    assert not console.is_terminal and console.width > 1000
    print_verdict(verdict, console)
    assert_every_figure_whole(out.getvalue(), verdict.to_json())


def test_a_narrow_terminal_gets_one_record_a_row_with_every_figure_whole(verdict):
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, force_terminal=True, width=40, color_system=None))
    text = out.getvalue()
    assert "…" not in text and "│" not in text  # no squeezed table: records instead
    words = " ".join(text.split())  # lines break between figures, never inside one
    for s in verdict.shapes:
        if s.median_us is not None:
            assert (f"shape {_shape_text(s.shape)}, dtype {s.dtype}, mode {s.mode}, median us {s.median_us:.2f}, "
                    f"IQR us {s.iqr_us:.2f}, ref us {s.ref_median_us:.2f}") in words


def test_a_wide_terminal_keeps_the_table(verdict):
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, force_terminal=True, width=200, color_system=None))
    assert "median us" in next(line for line in out.getvalue().splitlines() if "│" in line or "┃" in line)


def test_a_run_table_in_a_pipe_keeps_long_configs_and_reasons_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    config = {"BLOCK_SIZE_FOR_THE_ROWS": 1024, "num_warps": 8, "num_stages": 3, "EVICTION_POLICY": "evict_last"}
    attempt = {"id": 1, "seq": 1, "candidate_path": "/very/long/path/to/a/candidate_with_a_long_name.py",
               "config": config, "verdict": "pass", "speedup": 1.23456, "kept": False, "judge_wall_s": 21.5,
               "reasons": [], "keep_reason": "not faster than the best (1.1234x) beyond the noise floor"}
    run = {"id": "r0123abcd", "task": "rmsnorm", "device": "cpu", "device_name": "cpu", "status": "done",
           "stop_reason": "budget", "best_speedup": 1.1234}
    print_run(run, [attempt], [], console=make_console(file=out))
    text = out.getvalue()
    assert "…" not in text
    assert str(config) in text and "candidate_with_a_long_name.py" in text and "1.235" in text


def test_ratchet_eval_piped_with_a_narrow_columns_cuts_nothing(tmp_path):
    env = {**os.environ, "COLUMNS": "40"}
    proc = subprocess.run([sys.executable, "-m", "ratchet", "eval", "rmsnorm", str(SEED), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr  # 1: a loaded machine's clock check; the table is the point
    assert "…" not in proc.stdout
    header = next(line for line in proc.stdout.splitlines() if "median us" in line)
    for column in ("shape", "dtype", "mode", "median us", "IQR us", "ref us", "speedup", "TB/s", "roofline", "class"):
        assert column in header
    rows = [line for line in proc.stdout.splitlines() if "T=" in line and "H=" in line and "float" in line]
    assert rows and all(line.count(".") >= 4 for line in rows)  # median, IQR, ref and speedup, each whole
