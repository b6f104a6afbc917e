"""Outside coding agents: `ratchet program` writes program.md for a run, `ratchet eval --run` records
attempts with the loop's keep rule, and `ratchet mcp` serves the same as MCP tools (an SDK client
spawns the server over stdio and calls every tool)."""

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from ratchet.agents.api import CODES_NOT_FOR_AGENTS
from ratchet.judge.verdict import ERROR_CODES, FAIL_CODES
from ratchet.run.ledger import Ledger
from one_line_refusal import one_line_error, run_cli

SRC = Path(__file__).parent.parent / "src" / "ratchet"
SEED = str(SRC / "tasks" / "rmsnorm" / "seeds" / "cpu_torch.py")
WRONG = str(Path(__file__).parent / "redteam" / "cheats" / "p15_ignore_weight.py")  # rmsnorm, wrong_output


def slow_seed(tmp_path) -> str:
    """The CPU seed, honest, plus 2 ms per call: a first best that the seed itself clearly beats."""
    source = Path(SEED).read_text().replace("    T, H = x.shape\n", "    time.sleep(0.002)\n    T, H = x.shape\n")
    path = tmp_path / "slow_seed.py"
    path.write_text("import time\n" + source)
    return str(path)


def test_program_writes_the_run_and_commands_and_refuses_overwrite(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ledger = str(tmp_path / "l.sqlite")
    code, out, _ = run_cli(capsys, "program", "rmsnorm", "--ledger", ledger, "--device", "cpu", "--target", "2x")
    assert code == 0, out
    with Ledger(ledger) as led:
        (run,) = led.list_runs()
    assert (run["task"], run["device"], run["proposer"], run["status"], run["goal_speedup"]) == (
        "rmsnorm", "cpu", "agent", "running", 2.0)
    text = (tmp_path / "program.md").read_text()
    flag = f"--ledger {Path(ledger).resolve()}"
    for command in (f"ratchet context rmsnorm --run {run['id']} {flag}",
                    f"ratchet eval rmsnorm candidates/rmsnorm_001.py --run {run['id']} {flag} --json",
                    f'ratchet idea add rmsnorm "..." {flag}', f"ratchet show {run['id']} {flag}",
                    f"ratchet best {run['id']} -o best.py {flag}"):
        assert command in text, command
    assert "kernel(x, weight, eps)" in text and "`aten::rms_norm`" in text and "reach 2x" in text
    assert all(f"| `{code}` | fail |" in text for code in FAIL_CODES)
    assert all(f"| `{code}` | error |" in text for code in ERROR_CODES if code not in CODES_NOT_FOR_AGENTS)
    assert "{'T': 7, 'H': 1000}" in text  # the CPU shapes of this run

    # An existing program.md is never overwritten silently, and no run is created for nothing.
    code, _, err = run_cli(capsys, "program", "rmsnorm", "--ledger", ledger)
    assert "exists" in one_line_error(code, err)
    # --force with --run rewrites it for the same run; a run of another task is refused.
    (tmp_path / "program.md").write_text("old")
    code, _, _ = run_cli(capsys, "program", "rmsnorm", "--run", run["id"], "--ledger", ledger, "--force")
    assert code == 0 and f"run `{run['id']}`" in (tmp_path / "program.md").read_text()
    code, _, err = run_cli(capsys, "program", "softmax", "--run", run["id"], "--ledger", ledger, "-o", "p2.md")
    assert "is on task 'rmsnorm', not 'softmax'" in one_line_error(code, err)
    assert not (tmp_path / "p2.md").exists()
    with Ledger(ledger) as led:
        assert len(led.list_runs()) == 1


def test_eval_run_records_attempts_with_the_keep_rule(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    with Ledger(ledger) as led:
        from ratchet.agents.api import create_agent_run
        from ratchet.task import load_task

        run = create_agent_run(led, load_task("rmsnorm"), "cpu")
        gpu_run = led.create_run("rmsnorm", "rmsnorm", "cuda", "H200", "agent")
    base = ("--run", run, "--ledger", ledger)

    # 1. An honest but slow candidate: the first pass becomes the best.
    code, out, _ = run_cli(capsys, "eval", "rmsnorm", slow_seed(tmp_path), *base, "--json")
    first = json.loads(out)
    assert code == 0 and first["verdict"] == "pass", first["reasons"]
    assert (first["run"], first["attempt_seq"], first["kept"], first["best_seq"]) == (run, 1, True, 1)
    assert first["keep_reason"] == "first passing candidate"
    # 2. The seed (2 ms per call faster on every shape) replaces it.
    code, out, _ = run_cli(capsys, "eval", "rmsnorm", SEED, *base, "--json", "--config", '{"CHUNK": 64}')
    second = json.loads(out)
    assert code == 0 and second["verdict"] == "pass" and second["kept"] is True, second["keep_reason"]
    assert second["attempt_seq"] == 2 and second["best_seq"] == 2 and "faster" in second["keep_reason"]
    assert second["best_speedup"] == pytest.approx(second["speedup"]) and second["speedup"] > first["speedup"]
    # 3. A wrong candidate built on an idea fails, is recorded, and is not kept (text output says so).
    with Ledger(ledger) as led:
        idea = led.add_idea("rmsnorm", "skip the weight when it is all ones")
    code, out, _ = run_cli(capsys, "eval", "rmsnorm", WRONG, *base, "--idea", str(idea))
    assert code == 1 and "recorded as attempt 3 of run" in out and "not kept (verdict fail)" in out

    with Ledger(ledger) as led:
        attempts = led.attempts(run)
        best = led.best(run)
        (tried,) = led.ideas("rmsnorm")
    assert [(a["seq"], a["proposer"], a["verdict"], a["kept"]) for a in attempts] == [
        (1, "agent", "pass", 1), (2, "agent", "pass", 1), (3, "agent", "fail", 0)]
    assert attempts[1]["config"] == {"CHUNK": 64} and attempts[2]["reasons"][0]["code"] == "wrong_output"
    assert best["seq"] == 2 and best["source"] == Path(SEED).read_text()
    assert (attempts[2]["idea_id"], tried["status"], tried["attempts"], tried["kept"]) == (idea, "tried", 1, 0)

    # Refused before judging (one line, exit 2, nothing recorded): a duplicate, another task, another
    # device, judge flags a run does not use, an idea of another task.
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED, *base, "--config", '{"CHUNK": 64}')
    assert "already has an attempt" in one_line_error(code, err)
    code, out, err = run_cli(capsys, "eval", "softmax", SEED, *base, "--json")
    assert "is on task 'rmsnorm', not 'softmax'" in one_line_error(code, err)
    assert json.loads(out)["reasons"][0]["code"] == "bad_input"
    copy = tmp_path / "my_rmsnorm.py"  # a task named rmsnorm, but not the run's task file
    copy.write_text((SRC / "tasks" / "rmsnorm" / "task.py").read_text())
    code, _, err = run_cli(capsys, "eval", str(copy), SEED, *base)
    assert "judges the task file" in one_line_error(code, err)
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED, "--run", gpu_run, "--ledger", ledger, "--device", "cpu")
    assert "judges on cuda, not cpu" in one_line_error(code, err)
    code, _, err = run_cli(capsys, "eval", "rmsnorm", WRONG, *base, "--allow", "aten::rms_norm")
    line = one_line_error(code, err)  # names the flag given, not one the user never passed
    assert "--allow cannot be used with --run" in line and "--no-timing" not in line
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED, *base, "--no-timing")
    assert "--no-timing cannot be used with --run" in one_line_error(code, err)
    with Ledger(ledger) as led:
        other = led.add_idea("softmax", "online softmax")
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED, *base, "--idea", str(other))
    assert "is for task 'softmax'" in one_line_error(code, err)
    code, _, err = run_cli(capsys, "eval", "rmsnorm", SEED, "--run", "rnope", "--ledger", ledger)
    assert "unknown run 'rnope'" in one_line_error(code, err)
    with Ledger(ledger) as led:
        assert len(led.attempts(run)) == 3


TOOLS = {"brief", "start_run", "judge", "history", "add_idea", "list_ideas"}


def test_mcp_client_calls_every_tool(tmp_path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    ledger = tmp_path / "l.sqlite"
    # The SDK passes a server only a few variables of its own choosing unless given env: RATCHET_CACHE (the
    # suite's private ceilings cache) and PYTHONPATH (the code under test) must reach the server too.
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=dict(os.environ),
                                   args=["-m", "ratchet", "mcp", "--ledger", str(ledger), "--device", "cpu"])
    seed_source = Path(SEED).read_text()

    async def session_calls():
        with anyio.fail_after(240):
            async with stdio_client(params, errlog=open(tmp_path / "server.log", "w")) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    assert {t.name for t in listed.tools} == TOOLS

                    async def call(name, **arguments):
                        return await session.call_tool(name, arguments)

                    started = await call("start_run", task="rmsnorm")
                    assert not started.is_error, started.content
                    run = started.structured_content["run"]
                    assert started.structured_content == {"run": run, "task": "rmsnorm", "device": "cpu"}

                    brief = await call("brief", task="rmsnorm", run=run)
                    assert not brief.is_error, brief.content
                    assert "rmsnorm" in brief.content[0].text

                    judged = await call("judge", task="rmsnorm", candidate_source=seed_source, run=run)
                    assert not judged.is_error, judged.content
                    verdict = judged.structured_content
                    assert verdict["verdict"] == "pass" and verdict["speedup"] > 0, verdict["reasons"]
                    assert (verdict["kept"], verdict["attempt_seq"], verdict["run"]) == (True, 1, run)
                    assert "times_us" not in verdict["shapes"][0]
                    assert (tmp_path / "candidates").is_dir()  # the source was written next to the ledger

                    # The same source again (as a path this time) is a duplicate: a tool error, no crash.
                    dup = await call("judge", task="rmsnorm", candidate_path=SEED, run=run)
                    assert dup.is_error and "already has an attempt" in dup.content[0].text

                    hist = (await call("history", run=run)).structured_content
                    assert hist["run"]["id"] == run and hist["run"]["best_seq"] == 1
                    (attempt,) = hist["attempts"]
                    assert (attempt["seq"], attempt["verdict"], attempt["kept"], attempt["proposer"],
                            attempt["config"]) == (1, "pass", True, "agent", {"CHUNK": 256})

                    idea = await call("add_idea", task="rmsnorm", text="two rows per program at T=1")
                    assert not idea.is_error and idea.structured_content["status"] == "pending"
                    ideas = (await call("list_ideas", task="rmsnorm")).structured_content["result"]
                    assert [(i["id"], i["text"], i["author"]) for i in ideas] == [
                        (idea.structured_content["id"], "two rows per program at T=1", "agent")]

                    bad = await call("brief", task="no_such_task")
                    assert bad.is_error and "unknown task 'no_such_task'" in bad.content[0].text
                    bad = await call("judge", task="rmsnorm", run=run)
                    assert bad.is_error and "exactly one of candidate_source or candidate_path" in bad.content[0].text
                    bad = await call("history", run="rnope")
                    assert bad.is_error and "unknown run 'rnope'" in bad.content[0].text
                    # Still serving after the errors.
                    assert not (await call("list_ideas", task="rmsnorm")).is_error

    anyio.run(session_calls)
    with Ledger(ledger) as led:
        (run,) = led.list_runs()
        (attempt,) = led.attempts(run["id"])
    assert (run["proposer"], attempt["proposer"], attempt["verdict"], attempt["kept"]) == ("agent", "agent", "pass", 1)
    assert Path(attempt["candidate_path"]).parent == tmp_path / "candidates"
