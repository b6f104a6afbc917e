"""The judge: TRUSTED code. It imports nothing from run, search, agents, e2e, report or cli.

``evaluate(task, candidate, config, options) -> Verdict`` is the one entry point. Candidate code
runs only in worker subprocesses (worker.py); correctness is decided here, outside them.
"""

from __future__ import annotations

from ratchet.candidate import Candidate
from ratchet.judge.evaluation import Evaluation, JudgeOptions
from ratchet.judge.process import Limits
from ratchet.judge.verdict import Reason, ShapeResult, Verdict
from ratchet.task import Task

__all__ = ["evaluate", "JudgeOptions", "Limits", "Verdict", "Reason", "ShapeResult"]


def evaluate(task: Task, candidate: Candidate, config: dict | None = None,
             options: JudgeOptions | None = None) -> Verdict:
    """Judge ``candidate`` (with ``config``, already validated against its SPACE) on ``task``."""
    options = options or JudgeOptions()
    config = candidate.resolve_config(config)
    return Evaluation(task, candidate, config, options).run()
