"""The ratchet: propose -> judge -> keep or discard -> ledger, until the goal, the budget or Ctrl-C.

Every attempt is written to the ledger before the next is proposed, so a run killed at any moment
resumes (``ratchet run --resume RUN``) with no finished attempt lost or judged twice: the proposer is
told the recorded outcomes again and never proposes them. On several GPUs one evaluation runs per GPU
while the next candidates import and compile; outcomes are committed in proposal order. Evaluations go
through an executor (``run.executor``): this machine's GPUs or CPU, or a Ray cluster's
(``run.ray_executor``), where the proposer, the keep rule and the ledger stay in this process.

After an attempt on a GPU is kept (a new best; every passing one with ``counters="all"``), ncu profiles
one call of it (``ratchet.diagnose.ncu``) while the GPU's lock is held exclusively, so no timing runs beside the
profile; its counters are stored with the attempt as ncu's, not the judge's (``record.attach_counters``),
and explain the bottleneck class only. Kept ones only by default: a profile costs 10-40 s of the GPU
(estimated, not yet measured), more than judging a microsecond kernel.

Each evaluation gets the run's race bar (``keep.race_bar``: the best's times at its heaviest shapes,
read when the evaluation starts), so a candidate clearly slower there stops being timed. After a
passing attempt, when attempts win on different shapes, the loop judges a composite of the winners
next (``run.composite``), recorded with proposer ``composite``; it counts as an attempt of the run.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from ratchet.diagnose import ncu
from ratchet.candidate import Candidate, load_candidate
from ratchet.judge import JudgeOptions
from ratchet.judge.device_lock import holding, ranked
from ratchet.run import composite
from ratchet.run.executor import LOOKAHEAD, Executor, LocalExecutor
from ratchet.run.keep import race_bar
from ratchet.run.ledger import Ledger
from ratchet.run.record import attach_counters, record_and_keep
from ratchet.search.base import Outcome, Proposal, Proposer
from ratchet.task import Task


# LOOKAHEAD (run/executor.py): evaluations in flight per GPU beyond the one being timed. On the H200 an
# attempt at a microsecond kernel spent ~15 of its ~18 s starting, compiling and checking, and the GPU
# was busy 12% of a run with one ahead (2026-11-30, benchmarks/probes/loop_throughput.py).
# Judged but not yet committed evaluations wait behind a slower one proposed before them (commits go in
# proposal order); up to this many pipelines' worth, so one long compile does not idle the other slots.
UNCOMMITTED_PIPELINES = 2


@dataclass(frozen=True)
class RunLimits:
    target_speedup: float | None = None
    budget_attempts: int | None = None
    budget_seconds: float | None = None


@dataclass(frozen=True)
class LoopEvent:
    """One committed attempt, for displays."""

    seq: int
    candidate: str
    config: dict
    verdict: str
    speedup: float | None
    reasons: tuple[str, ...]
    kept: bool
    keep_reason: str
    best_speedup: float | None
    attempts: int
    judge_wall_s: float


@dataclass
class LoopResult:
    stop_reason: str
    attempts: int
    best_speedup: float | None
    failures: Counter = field(default_factory=Counter)


class Loop:
    def __init__(self, ledger: Ledger, run_id: str, task: Task, proposer: Proposer, limits: RunLimits,
                 judge_options: list[JudgeOptions], on_event: Callable[[LoopEvent], None] | None = None,
                 candidates: list[Candidate] | None = None, counters: str = "kept", race: bool = True,
                 composites: bool = True, executor: Executor | None = None):
        self.ledger, self.run_id, self.task, self.proposer = ledger, run_id, task, proposer
        self.limits, self.judge_options = limits, judge_options
        # Where evaluations run: this machine's GPUs or CPU (judge_options), or a Ray cluster.
        self.executor = executor or LocalExecutor(judge_options)
        self.on_event = on_event or (lambda event: None)
        self.candidates = {c.sha256: c for c in candidates or []}
        self.failures: Counter = Counter()
        self.started = time.monotonic()
        # ncu counters for kept ("kept") or all passing ("all") GPU attempts: off when asked ("off"), and
        # for the rest of the run once ncu is missing or refused (every later profile would fail alike).
        if counters not in ("kept", "all", "off"):
            raise ValueError(f"counters must be 'kept', 'all' or 'off', not {counters!r}")
        self.counters_all = counters == "all"
        self.counters_off: str | None = "not asked for" if counters == "off" else None
        self.race, self.composites = race, composites
        self.pending_composites: deque[Proposal] = deque()
        self.composite_parents: dict[str, composite.CompositeProposal] = {}  # by the composite's source hash

    # -- resume ----------------------------------------------------------------------------------
    def replay(self) -> int:
        """Tell the proposer every outcome already in the ledger; returns how many."""
        history = self.ledger.attempts(self.run_id)
        for attempt in history:
            candidate = self.candidates.get(attempt["source_sha256"])
            if candidate is None:
                continue
            self.proposer.tell(Proposal(candidate, attempt["config"]), _outcome(attempt))
            if attempt["verdict"] != "pass":
                self.failures.update(r["code"] for r in attempt["reasons"][:1])
        return len(history)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> LoopResult:
        self.ledger.set_status(self.run_id, "running")
        try:
            stop = judge_in_order(self._next_proposal, self._judge, self._commit, self.executor.slots,
                                  self._should_stop, pipeline=self.executor.pipeline)
        except KeyboardInterrupt:
            self.ledger.set_status(self.run_id, "stopped", "interrupted (Ctrl-C); resume with --resume")
            raise
        # Nothing left to propose: a proposer may say why it ended (e.g. its LLM budget).
        stop = stop or getattr(self.proposer, "stop_reason", None) or "search space exhausted"
        # A run that reached its end (target, budget, exhausted space) is done; only an interrupted
        # run (Ctrl-C, SIGKILL: status still "running") is resumed.
        self.ledger.set_status(self.run_id, "done", stop)
        best = self.ledger.best(self.run_id)
        return LoopResult(stop or "", self.ledger.count_attempts(self.run_id), best and best["speedup"], self.failures)

    def _next_proposal(self) -> Proposal | None:
        if self.pending_composites:
            return self.pending_composites.popleft()
        for _ in range(1000):
            proposal = self.proposer.propose()
            if proposal is None:
                return None
            self.candidates.setdefault(proposal.candidate.sha256, proposal.candidate)
            if not self.ledger.has_attempt(self.run_id, proposal.candidate.sha256, proposal.config):
                return proposal
            attempt = next(a for a in self.ledger.attempts(self.run_id)
                           if a["source_sha256"] == proposal.candidate.sha256 and a["config"] == proposal.config)
            self.proposer.tell(proposal, _outcome(attempt))
        return None

    def _judge(self, proposal: Proposal, slot):
        preset = getattr(proposal, "preset_verdict", None)  # nothing to judge (an LLM answer without code)
        if preset is not None:
            return dict(preset)
        return self.executor.judge(self.task, proposal.candidate, proposal.config, slot,
                                   self._race_bars() if self.race else {})

    def _race_bars(self) -> dict:
        """The race bar of each kind of device the run has a best on, read when an evaluation starts: an
        evaluation races only the best timed on its own kind (keep.race_bar)."""
        bars = {kind: race_bar(best, self.task) for kind, best in self.ledger.bests_by_device(self.run_id).items()}
        return {kind: bar for kind, bar in bars.items() if bar is not None}

    def _commit(self, proposal: Proposal, verdict: dict, options=None):
        attempt_id, decision = record_and_keep(
            self.ledger, self.run_id, proposal.candidate, proposal.config, verdict,
            proposal.proposer or self.proposer.name, parent_attempt=proposal.parent_attempt, idea=proposal.idea,
            # What a model charged for the proposal and the idea behind it (LLMProposal; None otherwise).
            **{k: getattr(proposal, k, None) for k in ("idea_id", "tokens_in", "tokens_out", "cost_usd")})
        if verdict["verdict"] != "pass":
            self.failures.update(r["code"] for r in verdict["reasons"][:1])
        made = self.composite_parents.pop(proposal.candidate.sha256, None)
        if made is not None:
            self.ledger.add_attempt_extra(attempt_id, composite.EXTRA_KEY, composite.attempt_extra(made))
        else:
            self.proposer.tell(proposal, Outcome(verdict["verdict"], verdict.get("speedup"),
                                                 tuple(r["code"] for r in verdict["reasons"]), attempt_id))
            if verdict["verdict"] == "pass" and not verdict.get("raced"):
                self._queue_composite()
        now_best = self.ledger.best(self.run_id)
        attempt = self.ledger.get_attempt(attempt_id)
        self.on_event(LoopEvent(
            seq=attempt["seq"], candidate=proposal.candidate.path, config=proposal.config, verdict=verdict["verdict"],
            speedup=verdict.get("speedup"), reasons=tuple(r["code"] for r in verdict["reasons"]), kept=decision.keep,
            keep_reason=decision.reason, best_speedup=now_best and now_best["speedup"],
            attempts=attempt["seq"], judge_wall_s=verdict.get("judge_wall_s", 0.0)))
        # ncu profiles on this machine's GPUs only (a slot of the local executor), not on a cluster's.
        if isinstance(options, JudgeOptions) and (decision.keep or self.counters_all):
            self._profile(proposal, verdict, attempt_id, options)

    def _queue_composite(self):
        """Judge next a composite of the attempts that win on different shapes, when there is a new one."""
        if not self.composites:
            return
        try:
            made = composite.propose(self.ledger, self.run_id, self.task,
                                     composite.directory_for(self.ledger, self.run_id))
        except Exception:  # a composite is an extra: a task whose inputs cannot be made on the CPU, say
            self.composites = False
            return
        if made is None or made.candidate.sha256 in self.composite_parents:
            return
        self.composite_parents[made.candidate.sha256] = made
        self.pending_composites.append(Proposal(made.candidate, {}, parent_attempt=made.parents[0],
                                                idea=composite.describe(made.routes), proposer=composite.PROPOSER))

    def _profile(self, proposal: Proposal, verdict: dict, attempt_id: int, options: JudgeOptions):
        """ncu's counters for a committed passing GPU attempt: one profile at most, never raising."""
        if self.counters_off or verdict["verdict"] != "pass" or options.device != "cuda":
            return
        binary, why = ncu.find_ncu()
        if binary is None:
            self.counters_off = why
            return
        with holding(options.device_lock, "exclusive"):  # nothing is timed on this GPU meanwhile
            result = ncu.profile_judged(self.task, proposal.candidate, proposal.config, verdict["verdict"],
                                        options.device, gpu_index=options.gpu_index)
        if result.permanent:
            self.counters_off = result.why
        try:
            attach_counters(self.ledger, attempt_id, result.to_json())
        except Exception:  # counters are an extra: a ledger hiccup here must not end the run
            pass

    def _should_stop(self, pending: int = 0) -> str | None:
        best = self.ledger.best(self.run_id)
        if self.limits.target_speedup and best and best["speedup"] and best["speedup"] >= self.limits.target_speedup:
            return "target reached"
        done = self.ledger.count_attempts(self.run_id)
        if self.limits.budget_attempts is not None and done + pending >= self.limits.budget_attempts:
            return "attempt budget spent"
        if self.limits.budget_seconds is not None and time.monotonic() - self.started >= self.limits.budget_seconds:
            return "time budget spent"
        return None


def judge_in_order(next_item: Callable[[], Any], judge: Callable[[Any, Any], Any],
                   commit: Callable[[Any, Any, Any], None], judge_options: list,
                   should_stop: Callable[[int], str | None] = lambda pending: None,
                   pipeline: int | None = None) -> str | None:
    """Judge items as they come from ``next_item`` (None: nothing to judge now), several at once on a
    GPU, and ``commit`` each outcome in the order the items came; the loop and ``ratchet eval A B ...``
    both judge through it. Returns ``should_stop``'s reason, or None once nothing is left to judge.

    Per GPU (one JudgeOptions each), LOOKAHEAD evaluations beside the one being timed: they start,
    import and compile on the CPU cores and share the GPU for their checks, and each waits its turn to be
    timed alone (judge.device_lock), the oldest first. On the CPU one at a time: checks would disturb the
    timing there. ``judge_options`` may be any slots (an executor's, e.g. Ray actors) given with their ``pipeline``: the
    most evaluations in flight at once.
    """
    if pipeline is None:
        pipeline = len(judge_options) * (1 + LOOKAHEAD) if judge_options[0].device == "cuda" else 1
    inflight: list[tuple[Any, Future, JudgeOptions]] = []

    def running_by_slot() -> dict[int, int]:
        counts = {id(o): 0 for o in judge_options}
        for _, f, o in inflight:
            if not f.done():
                counts[id(o)] += 1
        return counts

    stop = None
    submitted = 0
    with ThreadPoolExecutor(max_workers=pipeline) as pool:
        while True:
            stop = stop or should_stop(len(inflight))
            # Counted once per round, then kept up to date as items go out (an evaluation that ends
            # meanwhile is counted at the next round): on a cluster of hundreds of slots, counting at every
            # proposal cost the driver more than proposing (benchmarks/probes/driver_cost.py, 2026-12-02).
            counts = running_by_slot()
            total = sum(counts.values())
            while stop is None and total < pipeline and len(inflight) < UNCOMMITTED_PIPELINES * pipeline:
                item = next_item()
                if item is None:
                    break
                options = min(judge_options, key=lambda o: counts[id(o)])  # the slot with the fewest running
                # Ranked by proposal: the oldest in flight, the next to be committed, is timed first.
                inflight.append((item, pool.submit(_ranked_call, submitted, judge, item, options), options))
                submitted += 1
                counts[id(options)] += 1
                total += 1
                stop = should_stop(len(inflight))
            if not inflight:
                return stop
            # Commit in order; while the oldest is still judged, a finished younger one frees its slot
            # for the next item instead of waiting behind it.
            if not inflight[0][1].done():
                wait([f for _, f, _ in inflight if not f.done()], return_when=FIRST_COMPLETED)
            while inflight and inflight[0][1].done():
                item, future, options = inflight.pop(0)
                commit(item, future.result(), options)


def _ranked_call(rank: int, judge: Callable[[Any, Any], Any], item: Any, options: Any) -> Any:
    with ranked(rank):
        return judge(item, options)


def _outcome(attempt: dict) -> Outcome:
    return Outcome(attempt["verdict"], attempt["speedup"], tuple(r["code"] for r in attempt["reasons"]), attempt["id"])


def load_seeds(task: Task, seeds: list[str] | None, device: str) -> list[Candidate]:
    """The candidates a run starts from: the given files, or the task's seeds fit for the device.

    On the CPU, seeds whose file name starts with ``triton`` or ``cuda`` are left out by default (the
    interpreter is for correctness, not speed); on a GPU the CPU-only seeds (``cpu_``) are left out.
    """
    if seeds:
        return [load_candidate(s) for s in seeds]
    return [load_candidate(p) for p in task.seeds_for(device)]
