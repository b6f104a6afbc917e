"""Recording a judged attempt in a run and applying the keep rule: one code path for every proposer.

The loop (``ratchet run``), ``ratchet eval --run`` and the MCP server's ``judge`` tool all call
``record_and_keep``, so an attempt made by an outside agent is kept or discarded exactly as one the
tuner made.
"""

from __future__ import annotations

from typing import Any, Mapping

from ratchet.candidate import Candidate
from ratchet.run.keep import KeepDecision, decide
from ratchet.run.ledger import Ledger


def record_and_keep(ledger: Ledger, run_id: str, candidate: Candidate, config: Mapping[str, Any],
                    verdict: Mapping[str, Any], proposer: str, idea_id: int | None = None,
                    **attempt_fields) -> tuple[int, KeepDecision]:
    """Write the attempt, then make it the run's best if the keep rule says so.

    ``verdict`` is ``Verdict.to_json(with_times=True)`` (the keep rule needs the per-shape times).
    ``attempt_fields`` go to ``Ledger.record_attempt`` as they are (``parent_attempt``, ``idea``,
    token counts). A duplicate (same source and config in the run) raises LedgerError and records
    nothing. Returns the attempt's id and the keep decision (``decision.keep``, ``decision.reason``).
    The best it is compared with is the latest best timed on the verdict's ``device_name``.
    """
    # Read before recording: the candidate is compared with the best before it, timed on the same kind of
    # device (a run judged on a cluster of mixed GPUs keeps one best per kind; docs/scale.md).
    best = ledger.best(run_id, device_name=verdict.get("device_name") or None)
    best_verdict = None if best is None else {"verdict": best["verdict"], "shapes": best["shapes"]}
    decision = decide(verdict, best_verdict, candidate.source, best["source"] if best else "")
    # The attempt and its keep decision in one transaction: a kill between the two would leave a win
    # recorded but never kept, and a resume does not judge it again.
    attempt_id = ledger.record_attempt(run_id, candidate.path, candidate.source, config, verdict, proposer,
                                       idea_id=idea_id, keep=decision.keep,
                                       keep_reason=decision.reason, **attempt_fields)
    return attempt_id, decision


COUNTERS_KEY = "counters"  # in the attempt's extra; marked source "ncu": never the judge's


def attach_counters(ledger: Ledger, attempt_id: int, counters: Mapping[str, Any]) -> bool:
    """Store ncu's counters (``NcuResult.to_json()``) with a recorded attempt, after its verdict; at most
    once per attempt. They explain the verdict and never change it, so the keep decision is not revisited.
    Returns whether they were stored (False: the attempt has counters already)."""
    return ledger.add_attempt_extra(attempt_id, COUNTERS_KEY, dict(counters))
