"""`program.md` and the brief for a GPU run, written on a machine without a GPU (`--device cuda
--device-name H200`): the GPU's shapes, floors named as datasheet leads, the reference times the ledger
measured on that GPU, the timing protocol and the cheap checks; the run is judged later on the GPU."""

import pytest
import torch

from ratchet.run.ledger import Ledger
from one_line_refusal import one_line_error, run_cli

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="about a machine without a GPU")
SEED = "src/ratchet/tasks/rmsnorm/seeds/cpu_torch.py"


def test_program_for_an_h200_run_on_a_cpu_machine(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ledger = str(tmp_path / "l.sqlite")
    code, out, err = run_cli(capsys, "program", "rmsnorm", "--device", "cuda", "--device-name", "H200",
                             "--ledger", ledger)
    assert code == 0, err
    with Ledger(ledger) as led:
        (run,) = led.list_runs()
    assert (run["device"], run["device_name"], run["proposer"]) == ("cuda", "NVIDIA H200", "agent")
    text = (tmp_path / "program.md").read_text()
    # The GPU's shape set (not the CPU's), floors at the H200's datasheet bandwidth, named as leads.
    assert "| T=16384 H=8192 | 0.5 | 112 |" in text
    # The CPU shapes appear once, where the correctness-only check on the CPU is named.
    shapes_line = next(line for line in text.splitlines() if "Shapes on cuda:" in line)
    gpu_part, cpu_part = shapes_line.split("The CPU check runs ")
    assert "{'T': 16384, 'H': 8192}" in gpu_part and "{'T': 7, 'H': 1000}" not in gpu_part
    assert "{'T': 7, 'H': 1000}" in cpu_part and text.count("{'T': 7, 'H': 1000}") == 1
    assert "Datasheet leads, not measurements" in text and "datasheet numbers for H200 (4.8 TB/s" in text
    assert "not measured on this device yet (no judged attempt of rmsnorm on NVIDIA H200" in text
    # How the judge times, and the checks that cost no GPU time, in the loop and the commands.
    for fact in ("the L2 is flushed", "The launch hold: the GPU is kept busy for 300 µs", "timed on replay",
                 "captured into a CUDA graph", "weighted geometric mean", "**Kept** means",
                 "TRITON_INTERPRET=1 ratchet eval rmsnorm FILE --device cpu --no-timing --json",
                 "ratchet check rmsnorm FILE --arch sm_90", "It does NOT prove that the file compiles"):
        assert fact in text, fact
    # program.md and the brief name the same CUDA build helper.
    assert "`ratchet.cuda_build.load_cached`" in text and "load_inline` once per source" in text
    code, brief, _ = run_cli(capsys, "context", "rmsnorm", "--run", run["id"], "--ledger", ledger)
    assert code == 0 and "`ratchet.cuda_build.load_cached`" in brief and "load_inline` once per source" in brief
    assert "| T=16384 H=8192 | 0.5 | 112 |" in brief and "the L2 is flushed" in brief
    # The run is judged on the GPU: here, its eval refuses in one line; a cuda run needs a name without a GPU.
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED.replace("src", str(_root() / "src"), 1), "--run",
                           run["id"], "--ledger", ledger)
    assert "no CUDA device is present" in one_line_error(code, err)
    code, _, err = run_cli(capsys, "program", "rmsnorm", "--device", "cuda", "--ledger", ledger, "-o", "p2.md")
    assert "give --device-name NAME" in one_line_error(code, err)
    code, _, err = run_cli(capsys, "program", "rmsnorm", "--device-name", "H200", "--ledger", ledger, "-o", "p3.md")
    assert "goes with --device cuda" in one_line_error(code, err)
    with Ledger(ledger) as led:
        assert len(led.list_runs()) == 1


def _root():
    from pathlib import Path

    return Path(__file__).parent.parent


def test_brief_for_the_h200_shows_the_reference_times_its_runs_measured(tmp_path, capsys):
    ledger = tmp_path / "l.sqlite"
    rows = [{"shape": {"H": 4096, "T": 1}, "dtype": "bfloat16", "held_out": False, "correct": True, "mode": "graph",
             "median_us": 4.6, "ref_median_us": 12.61, "speedup": 2.74},
            {"shape": {"H": 4096, "T": 4096}, "dtype": "bfloat16", "held_out": False, "correct": True,
             "mode": "eager", "median_us": 37.7, "ref_median_us": 153.6, "speedup": 4.07}]
    with Ledger(ledger) as led:
        h200 = led.create_run("rmsnorm", "rmsnorm", "cuda", "NVIDIA H200", "tune")
        led.record_attempt(h200, "a.py", "# a", {}, {"verdict": "pass", "speedup": 3.3, "reasons": [],
                                                     "shapes": rows, "judge_wall_s": 9.0}, "tune")
        other = led.create_run("rmsnorm", "rmsnorm", "cuda", "NVIDIA B200", "tune")  # another GPU: not shown
        led.record_attempt(other, "b.py", "# b", {}, {"verdict": "pass", "speedup": 3.3, "reasons": [],
                                                      "shapes": [{**rows[0], "ref_median_us": 99.0}],
                                                      "judge_wall_s": 9.0}, "tune")
    code, brief, _ = run_cli(capsys, "context", "rmsnorm", "--device", "cuda", "--device-name", "H200",
                             "--ledger", str(ledger))
    assert code == 0
    row = next(line for line in brief.splitlines() if line.startswith("| T=1 H=4096 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:8] == ["12.6 (graph)", "-", "-"]  # bf16 measured; fp16 and fp32 not yet
    row = next(line for line in brief.splitlines() if line.startswith("| T=4096 H=4096 |"))
    assert [c.strip() for c in row.strip("|").split("|")][5] == "154 (eager)"
    assert "the reference's median as the judge measured it on NVIDIA H200 (ledger" in brief
    assert "99.0" not in brief
    code, _, err = run_cli(capsys, "context", "rmsnorm", "--device", "cpu", "--device-name", "H200")
    assert "goes with --device cuda" in one_line_error(code, err)


def test_mcp_start_run_for_the_h200_without_a_gpu(tmp_path):
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    from ratchet.agents.mcp_server import build_server

    server = build_server(tmp_path / "l.sqlite", "cuda", "H200")

    async def start():
        return await server.call_tool("start_run", {"task": "rmsnorm"})

    result = anyio.run(start)
    assert not result.is_error and result.structured_content["device"] == "cuda"
    with Ledger(tmp_path / "l.sqlite") as led:
        (run,) = led.list_runs()
    assert (run["id"], run["device"], run["device_name"]) == (result.structured_content["run"], "cuda", "NVIDIA H200")
