"""Starting and resuming runs: what ``ratchet run`` does, as a library call."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace

from rich.console import Console

from ratchet.judge import JudgeOptions
from ratchet.judge.device_lock import DeviceLock
from ratchet.run.executor import ExecutorChoice, make_executor
from ratchet.run.ledger import Ledger, LedgerError
from ratchet.run.liveness import this_process
from ratchet.run.loop import Loop, RunLimits, load_seeds
from ratchet.search.llm_client import LLMSettings
from ratchet.search.tune import TuneProposer
from ratchet.task import load_task


@dataclass(frozen=True)
class RunRequest:
    task: str | None
    seeds: tuple[str, ...] = ()
    proposer: str = "tune"
    sampler: str = "tpe"
    target: float | None = None
    budget: int | None = None
    seconds: float | None = None
    device: str = "cpu"
    gpus: tuple[int, ...] = ()
    resume: str | None = None
    llm: LLMSettings | None = None  # with proposer "llm"
    # Where evaluations run (--executor, --address). None: local for a new run; on --resume, what the run
    # was started with (given with --resume, it replaces that: the same run on another cluster).
    executor: ExecutorChoice | None = None


def start_or_resume(ledger: Ledger, request: RunRequest, console: Console | None = None) -> int:
    from ratchet.report.live import RunDisplay
    from ratchet.report.terminal import make_console

    console = console or make_console()
    started = time.monotonic()
    if request.resume:
        run = ledger.get_run(request.resume)
        if run["status"] == "done":
            raise LedgerError(f"run '{run['id']}' is finished ({run['stop_reason'] or 'done'}); start a new run")
        options = run["options"]
        request = RunRequest(task=run["task_path"], seeds=tuple(options.get("seeds", ())),
                             proposer=run["proposer"], sampler=options.get("sampler", "tpe"),
                             target=run["goal_speedup"], budget=run["budget_attempts"],
                             seconds=run["budget_seconds"], device=run["device"],
                             gpus=tuple(options.get("gpus", ())), resume=run["id"],
                             llm=LLMSettings(**options["llm"]) if options.get("llm") else None,
                             executor=request.executor or ExecutorChoice.from_options(options))
    task = load_task(request.task)
    candidates = load_seeds(task, list(request.seeds), request.device)
    if not candidates:
        raise LedgerError(f"task '{task.name}' has no seeds for {request.device}; give --seed FILE")
    chat = None
    if request.proposer == "llm":
        from ratchet.search.llm_client import LLMSetupError, make_chat

        if request.llm is None:
            raise LLMSetupError("--proposer llm needs --llm-model NAME (the model your endpoint serves)")
        chat = make_chat(request.llm)  # checks model and key before a run is created
    choice = request.executor or ExecutorChoice()
    # On a cluster Ray places evaluations on its GPUs; the local GPU list is for the local executor only.
    gpus = () if choice.kind != "local" else request.gpus or ((0,) if request.device == "cuda" else ())
    # One lock per GPU: checks share it, timing holds it alone (judge.device_lock).
    locks = {g: DeviceLock() for g in gpus}
    judge_options = [JudgeOptions(device=request.device, gpu_index=g, device_lock=locks[g]) for g in gpus] or [
        JudgeOptions(device=request.device)]
    # Before a run is created: a cluster that cannot be reached, or has no GPU, is one line and no run.
    executor = None if choice.kind == "local" else make_executor(choice, task, request.device, judge_options)
    try:
        return _start(ledger, request, console, started, task, candidates, chat, choice, executor, judge_options)
    finally:
        if executor is not None:
            executor.close()


def _start(ledger: Ledger, request: RunRequest, console, started: float, task, candidates, chat, choice,
           executor, judge_options) -> int:
    from ratchet.report.live import RunDisplay

    gpus = [o.gpu_index for o in judge_options if o.gpu_index is not None]
    backup_ledger(ledger)
    owner = this_process()  # once this process is gone, `ratchet runs` says so
    if request.resume:
        run_id = request.resume
        ledger.claim_run(run_id, owner)
    else:
        run_id = ledger.create_run(
            task=task.name, task_path=task.source_path or task.name, device=request.device,
            device_name=executor.device_names if executor is not None else _device_name(request.device), proposer=request.proposer, goal_speedup=request.target,
            budget_attempts=request.budget, budget_seconds=request.seconds,
            options={"seeds": [c.path for c in candidates], "sampler": request.sampler, "gpus": list(gpus),
                     **({"llm": asdict(request.llm)} if chat else {}),  # no key: it stays in the environment
                     **choice.to_options()},
            owner=owner)
    if chat is not None:
        from ratchet.search.llm import LLMProposer, summary

        proposer = LLMProposer(task, ledger, run_id, candidates, chat, request.llm, device=request.device,
                               sampler=request.sampler)
        known, described = proposer.candidates(), f"llm ({summary(request.llm)}) + tune/{request.sampler}"
    else:
        proposer = TuneProposer(candidates, sampler=request.sampler)
        known, described = candidates, f"{request.proposer}/{request.sampler}"
    limits = RunLimits(request.target, request.budget, request.seconds)
    with RunDisplay(run_id, task.name, request.budget, console) as display:
        # The judge says where each attempt is (phase, shape, elapsed); the display shows it.
        judge_options = [replace(o, progress=display.progress) for o in judge_options]
        loop = Loop(ledger, run_id, task, proposer, limits, judge_options, on_event=display, candidates=known,
                    executor=executor)
        replayed = loop.replay()
        # A campaign starts its runs through resume (created first, so a kill never starts one twice): a run
        # with nothing recorded is starting, whatever the path.
        verb = (f"resuming run {run_id} ({replayed} attempts recorded)" if request.resume and replayed
                else f"run {run_id} started")
        where = "" if executor is None else f" over a Ray cluster ({len(executor.slots)} actors)"
        console.print(f"{verb}: {task.name} on {request.device}{where}, {len(candidates)} seed(s), proposer "
                      f"{described}", highlight=False)
        try:
            result = loop.run()
        except KeyboardInterrupt:
            console.print(f"stopped; resume with: ratchet run --resume {run_id}")
            return 130
        except LedgerError as exc:
            _mark_failed(ledger, run_id, exc)
            raise
        finally:
            if chat is not None:
                proposer.close()
    best = ledger.best(run_id)
    best_text = f"{best['speedup']:.3f}x" if best else "none"
    console.print(f"run {run_id} {result.stop_reason}: {result.attempts} attempts, best {best_text}", highlight=False)
    if best:
        console.print(f"  best: {best['candidate_path']} {best['config']}  ->  ratchet best {run_id} -o best.py",
                      highlight=False)
    kinds = ledger.bests_by_device(run_id)
    if len(kinds) > 1:  # timed on several kinds of GPU: one best each, never compared with another kind's
        for kind, kept in kinds.items():
            console.print(f"  best on {kind}: #{kept['seq']} {kept['speedup']:.3f}x", highlight=False)
    if chat is not None:
        cost = f"${proposer.cost_spent:.4f}" if request.llm.priced else "cost unknown (no prices given)"
        console.print(f"  model: {len(proposer.calls)} answers, {proposer.tokens_spent} tokens, {cost}",
                      highlight=False)
    if result.failures:
        console.print("  failures by reason: " + ", ".join(f"{c} {n}" for c, n in result.failures.most_common()))
    from ratchet.report.console import print_run_summary

    print_run_summary(ledger.get_run(run_id), ledger.attempts(run_id), best, time.monotonic() - started, console)
    return 0


def backup_ledger(ledger: Ledger) -> None:
    """Back the ledger up before the run writes to it. A failed backup is said, not fatal: the run's own
    writes then say whether the ledger is usable at all."""
    try:
        if ledger.list_runs():  # an empty ledger has nothing to lose
            ledger.backup()
    except LedgerError as exc:
        print(f"ratchet: warning: no backup of the ledger made at this start: {exc}", file=sys.stderr)


def _mark_failed(ledger: Ledger, run_id: str, exc: LedgerError) -> None:
    """Record why the run ended, if the ledger still takes writes (a full disk may refuse this too;
    the run then reads ``gone`` once this process has exited)."""
    try:
        ledger.set_status(run_id, "failed", f"ledger error: {exc}; resume with --resume")
    except LedgerError:
        pass


def _device_name(device: str) -> str:
    from ratchet.hardware.ceilings import device_identity

    return device_identity(device)[0]
