"""Ratchet's agent interface as MCP tools over stdio (the official MCP Python SDK).

Tools: ``brief`` (the task and the run so far, in markdown), ``start_run`` (a run to record into),
``judge`` (judge a candidate; recorded in the run with the loop's keep rule when a run is given),
``history`` (a run's attempts in short), ``add_idea`` and ``list_ideas``. A failing call (unknown task,
duplicate attempt, bad config, ...) is an MCP tool error with one line of text; the server goes on.
The logic is in ``ratchet.agents.api``, shared with ``ratchet eval --run`` and ``ratchet program``.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ratchet.agents import DEFAULT_MAX_CHARS as BRIEF_CHARS

INSTRUCTIONS = (
    "Ratchet judges GPU kernels for LLM inference. Loop: start_run(task) once (or use a run you were given); "
    "brief(task, run) to read the task, shapes, best so far, failures and ideas; write a candidate (a Python "
    "file defining kernel(...) with the reference's parameters, optional SPACE) and call judge(task, "
    "candidate_source=..., run=...); read verdict, reasons, speedup and kept; add_idea for what to try next; "
    "repeat. The judge refuses wrong or cheating kernels with named reason codes; only verified wins are kept."
)


def _sdk():
    """The high-level server class and its tool-error type: MCPServer in mcp 2.x, FastMCP in 1.x."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        from mcp.server.fastmcp import FastMCP as MCPServer
        from mcp.server.fastmcp.exceptions import ToolError
    return MCPServer, ToolError


def build_server(ledger_path: Path, device: str):
    from ratchet.agents import api as agents_api
    from ratchet.run.ledger import Ledger

    MCPServer, ToolError = _sdk()
    server = MCPServer("ratchet", instructions=INSTRUCTIONS)

    @contextmanager
    def tool_errors() -> Iterator[None]:
        # Every failure becomes one line for the agent; nothing escapes to the SDK as a crash.
        try:
            yield
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - the server must survive any one call
            from ratchet.candidate import CandidateError
            from ratchet.run.ledger import LedgerError
            from ratchet.task import TaskError

            from ratchet.agents.brief import BriefError

            known = (TaskError, CandidateError, LedgerError, BriefError)
            raise ToolError(str(exc) if isinstance(exc, known) else f"{type(exc).__name__}: {exc}") from None

    @server.tool()
    def brief(task: str, run: str | None = None) -> str:
        """The brief for TASK (built-in name or task file) in markdown: the operation and its reference,
        the shapes and dtypes, the hardware, and with a run the best so far, recent failures and ideas."""
        with tool_errors():
            from ratchet.agents.brief import build_brief
            from ratchet.task import load_task

            if run is not None:
                with Ledger(ledger_path, create=False) as ledger:
                    r = ledger.get_run(run)
                    t = agents_api.task_for_run(r, task)
                    return build_brief(t, ledger=ledger, run_id=run, device=r["device"], max_chars=BRIEF_CHARS)
            t = load_task(task)
            if ledger_path.exists():  # the task's latest run on this device, if any
                with Ledger(ledger_path, create=False) as ledger:
                    return build_brief(t, ledger=ledger, run_id=None, device=device, max_chars=BRIEF_CHARS)
            return build_brief(t, ledger=None, run_id=None, device=device, max_chars=BRIEF_CHARS)

    @server.tool()
    def start_run(task: str, target_speedup: float | None = None, device_name: str | None = None) -> dict[str, Any]:
        """Create a run of TASK on this server's device for your attempts (proposer 'agent'); returns its id.
        Pass it as `run` to judge, brief and history. target_speedup is the run's goal, e.g. 2.0.
        device_name (e.g. "H200", with a cuda server) names the GPU that will judge the run when this
        machine has none."""
        with tool_errors():
            from ratchet.task import load_task

            t = load_task(task)
            with Ledger(ledger_path) as ledger:
                run_id = agents_api.create_agent_run(ledger, t, device, target_speedup, device_name)
            return {"run": run_id, "task": t.name, "device": device}

    @server.tool()
    def judge(task: str, candidate_source: str | None = None, candidate_path: str | None = None,
              config: dict[str, Any] | None = None, run: str | None = None, idea: int | None = None) -> dict[str, Any]:
        """Judge a candidate kernel on TASK: give its Python source (candidate_source) or a file
        (candidate_path). config picks one point of its SPACE. With run, the attempt is recorded in the run
        and kept as the new best only if the keep rule says so; idea links it to an idea's id. Returns the
        verdict (pass/fail/error), reasons (codes with details), speedup, per-shape rows, and kept."""
        with tool_errors():
            if (candidate_source is None) == (candidate_path is None):
                raise ToolError("give exactly one of candidate_source or candidate_path")
            path = candidate_path or str(agents_api.save_candidate(candidate_source, ledger_path.parent / "candidates"))
            return agents_api.judge(ledger_path, task, path, config, run_id=run, idea_id=idea, device=device)

    @server.tool()
    def history(run: str) -> dict[str, Any]:
        """A run and its attempts in order: seq, verdict, reason codes, speedup, kept, config, candidate."""
        with tool_errors():
            with Ledger(ledger_path, create=False) as ledger:
                return agents_api.history(ledger, run)

    @server.tool()
    def add_idea(task: str, text: str) -> dict[str, Any]:
        """Record an idea for TASK (what to try, or what was learned); returns it with its id."""
        with tool_errors():
            with Ledger(ledger_path) as ledger:
                return agents_api.add_idea(ledger, task, text)

    @server.tool()
    def list_ideas(task: str) -> list[dict[str, Any]]:
        """The ideas for TASK with their outcomes: status, attempts that tried them, passed, kept, best speedup."""
        with tool_errors():
            return agents_api.list_ideas(ledger_path, task)

    return server
