"""The proposer protocol: two methods, so a proposer can be tested offline by replaying results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ratchet.candidate import Candidate


@dataclass(frozen=True)
class Proposal:
    """One thing to judge: a candidate file with one config of its SPACE."""

    candidate: Candidate
    config: dict[str, Any]
    parent_attempt: int | None = None
    idea: str | None = None
    proposer: str = ""


@dataclass(frozen=True)
class Outcome:
    """What the judge said about a proposal, as a proposer needs it."""

    verdict: str  # "pass" | "fail" | "error"
    speedup: float | None  # weighted geometric mean against the reference, same session
    reasons: tuple[str, ...] = field(default_factory=tuple)  # reason codes
    attempt_id: int | None = None


class Proposer(Protocol):
    name: str

    def propose(self) -> Proposal | None:
        """The next proposal, or None when this proposer has nothing left to try."""

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        """The judge's outcome for a proposal this proposer made (or one replayed from the ledger)."""
