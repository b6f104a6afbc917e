"""What outside coding agents use: runs they record into, judging a candidate into a run, the run's
history in short, ideas, and the ``program.md`` that tells an agent the loop and the rules.

``ratchet eval`` (one file or many, with or without ``--run``), ``ratchet program`` and the MCP server
(``ratchet mcp``) are thin over this module: ``judge_files`` is the one path from candidate files to
verdicts and into a run. An agent's attempt is recorded and kept or discarded by the same code as the loop's
(``ratchet.run.record.record_and_keep``), with the run's own task file and device, so an agent cannot
choose an easier task, another device or judge flags (``--allow``, ``--no-timing``) for a run.
"""

from __future__ import annotations

import hashlib
import inspect
import shlex
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ratchet.candidate import Candidate, CandidateError, load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.verdict import Reason, Verdict
from ratchet.run.keep import KeepDecision
from ratchet.run.ledger import Ledger, LedgerError, config_key
from ratchet.task import BUILTIN_TASKS_DIR, Task, builtin_task_names, load_task

AGENT = "agent"  # the proposer name of attempts recorded by outside agents
# Reason codes an agent's judged attempt never gets: usage errors are refused before judging, and
# no_code is the LLM proposer's (a model's answer without a candidate file).
CODES_NOT_FOR_AGENTS = ("bad_input", "no_code", "lost")


# -- runs -------------------------------------------------------------------------------------------


def create_agent_run(ledger: Ledger, task: Task, device: str, goal_speedup: float | None = None,
                     device_name: str | None = None, options: Mapping[str, Any] | None = None) -> str:
    """A run that no built-in proposer drives: outside agents record their attempts into it.

    A cuda run can be created on a machine without a GPU when ``device_name`` says which GPU will judge
    it (``"H200"``); its attempts are judged later, on that machine."""
    return ledger.create_run(task=task.name, task_path=task.source_path or task.name, device=device,
                             device_name=resolve_device_name(device, device_name), proposer=AGENT,
                             goal_speedup=goal_speedup,
                             options={"created_by": "ratchet program / mcp", **dict(options or {})})


def resolve_device_name(device: str, given: str | None) -> str:
    """The name a run or brief records for its device: the datasheet's full name for a given GPU name
    ("H200" -> "NVIDIA H200", what torch reports there, so cached ceilings match), else the local one.
    Raises LedgerError for a cuda device with neither a name nor a GPU here."""
    from ratchet.hardware.ceilings import device_identity
    from ratchet.hardware.sheets import find_sheet

    if given:
        if device != "cuda":
            raise LedgerError("--device-name names a GPU: it goes with --device cuda")
        name, sheet = " ".join(given.split()), find_sheet(given)
        if sheet and sheet.vendor.lower() not in name.lower():
            name = f"{sheet.vendor} {name}"  # torch's name for the part: "NVIDIA H200"
        return name
    if device == "cuda" and default_device() != "cuda":
        raise LedgerError("no CUDA device is present on this machine: give --device-name NAME (e.g. H200) "
                          "for the GPU that will judge the run")
    return device_identity(device)[0]


def task_for_run(run: Mapping[str, Any], spec: str) -> Task:
    """The task a run judges with: the run's own task file. ``spec`` (what the user typed) must name it.

    A built-in name is accepted for the run's file; another file, even one whose task has the same
    name, is refused: a run's attempts are comparable only when judged by one task definition.
    """
    recorded = Path(run["task_path"])
    task = load_task(spec)
    if task.name != run["task"]:
        raise LedgerError(f"run '{run['id']}' is on task '{run['task']}', not '{task.name}'")
    if recorded.is_file() and task.source_path and Path(task.source_path).resolve() != recorded.resolve():
        if spec == task.name:  # the built-in name, and the run was made from another copy of that file
            return load_task(str(recorded))
        raise LedgerError(f"run '{run['id']}' judges the task file {recorded}, not {task.source_path}")
    return task


def check_attempt(ledger: Ledger, run: Mapping[str, Any], device: str, candidate: Candidate,
                  config: Mapping[str, Any], idea_id: int | None) -> None:
    """Refuse, before spending a judge's time, what could not be recorded in the run."""
    if device != run["device"]:
        raise LedgerError(f"run '{run['id']}' judges on {run['device']}, not {device}")
    if ledger.has_attempt(run["id"], candidate.sha256, config):
        raise LedgerError(f"run '{run['id']}' already has an attempt with this source and config {dict(config)} "
                          "(change the code or the config)")
    if idea_id is not None:
        idea = ledger.get_idea(idea_id)
        if idea["task"] != run["task"]:
            raise LedgerError(f"idea {idea_id} is for task '{idea['task']}', not '{run['task']}'")


def record(ledger: Ledger, run_id: str, candidate: Candidate, config: Mapping[str, Any], verdict_json: dict,
           idea_id: int | None = None) -> dict[str, Any]:
    """Record an agent's judged attempt with the loop's keep rule; returns what the agent needs to know."""
    from ratchet.run.record import record_and_keep

    attempt_id, decision = record_and_keep(ledger, run_id, candidate, config, verdict_json, AGENT, idea_id=idea_id)
    return recorded_fields(ledger, run_id, attempt_id, decision)


def recorded_fields(ledger: Ledger, run_id: str, attempt_id: int, decision: KeepDecision) -> dict[str, Any]:
    best = ledger.best(run_id)
    return {"run": run_id, "attempt_seq": ledger.get_attempt(attempt_id)["seq"], "kept": decision.keep,
            "keep_reason": decision.reason, "best_speedup": best and best["speedup"],
            "best_seq": best and best["seq"]}


def history(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """A run and its attempts in short: what an agent reads to choose the next attempt."""
    run = ledger.get_run(run_id)
    attempts = [{"seq": a["seq"], "verdict": a["verdict"], "reasons": [r["code"] for r in a["reasons"]],
                 "detail": a["reasons"][0]["detail"][:200] if a["reasons"] else "", "speedup": a["speedup"],
                 "kept": bool(a["kept"]), "config": a["config"], "candidate": Path(a["candidate_path"]).name,
                 "proposer": a["proposer"], "idea_id": a["idea_id"]} for a in ledger.attempts(run_id)]
    summary = {k: run[k] for k in ("id", "task", "device", "device_name", "status", "goal_speedup",
                                   "best_speedup", "best_seq")}
    return {"run": summary, "attempts": attempts}


# -- judging: the one path from candidate files to verdicts (and into a run) -------------------------


@dataclass
class Judged:
    """One file's outcome: the judge's verdict, or a ``bad_input`` error when the file was refused before
    judging (``refused`` says why, one line); with a run, the attempt's place in it (``recorded``)."""

    path: str
    verdict: Verdict
    recorded: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    counters: dict[str, Any] | None = None
    error: Exception | None = field(default=None, repr=False)  # the refusal, to raise where one file was asked

    def to_json(self, with_times: bool = False) -> dict[str, Any]:
        extra = {"counters": self.counters} if self.counters else {}
        return {**self.verdict.to_json(with_times=with_times), **self.recorded, **extra}


@dataclass
class _Item:
    path: str
    candidate: Candidate | None = None
    config: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None


def judge_files(task: Task, paths: Sequence[str], options: JudgeOptions, config: Mapping[str, Any] | None = None,
                ledger: Ledger | None = None, run: Mapping[str, Any] | None = None, idea_id: int | None = None,
                ncu: bool = False, on_result: Callable[[Judged], None] | None = None) -> list[Judged]:
    """Judge candidate files in order, pipelined as the loop judges (``run.loop.judge_in_order``: on a
    GPU the next files start, import and compile while one is timed); with ``run``, record each in order
    with the keep rule (``run.record.record_and_keep``) and race it against the run's best.

    ``ratchet eval`` (one file or many) and the MCP server's ``judge`` tool both come here, so a batch
    gives the verdicts and ledger rows that judging the files one by one gives. A file that cannot be
    judged (missing, a config outside its SPACE, a duplicate in the run, its own earlier copy in the
    batch) gets a ``bad_input`` verdict and is not recorded; the others go on. ``on_result`` is called
    with each outcome as it is committed, in order; the outcomes are also returned.
    """
    from ratchet.run.keep import race_bar
    from ratchet.run.loop import judge_in_order

    queue = list(paths)
    seen: set[tuple[str, str]] = set()  # (source hash, config) of this batch's files taken so far
    results: list[Judged] = []

    def next_item() -> _Item | None:
        if not queue:
            return None
        item = _Item(queue.pop(0))
        try:
            item.candidate = load_candidate(item.path)
            item.config = item.candidate.resolve_config(config or {})
            key = (item.candidate.sha256, config_key(item.config))
            if run is not None:
                if key in seen:
                    raise LedgerError(f"run '{run['id']}' already has an attempt with this source and config "
                                      f"{item.config} (change the code or the config)")
                check_attempt(ledger, run, options.device, item.candidate, item.config, idea_id)
            seen.add(key)
        except (CandidateError, LedgerError) as exc:
            item.error = exc
        return item

    def judge_one(item: _Item, opts: JudgeOptions) -> Verdict:
        if item.error is not None:
            return Verdict("error", [Reason("bad_input", str(item.error))], task=task.name, candidate=item.path)
        if run is not None and opts.race is None:  # the run's best when this evaluation starts
            opts = replace(opts, race=race_bar(ledger.best(run["id"]), task))
        return evaluate(task, item.candidate, item.config, opts)

    def commit(item: _Item, verdict: Verdict, opts: JudgeOptions) -> None:
        judged = Judged(item.path, verdict, refused=item.error and str(item.error), error=item.error)
        if item.error is None:
            if ncu:  # after the verdict, with nothing timed beside it
                from ratchet.diagnose.ncu import profile_judged
                from ratchet.judge.device_lock import holding

                with holding(opts.device_lock, "exclusive"):
                    judged.counters = profile_judged(task, item.candidate, item.config, verdict.verdict,
                                                     opts.device, gpu_index=opts.gpu_index).to_json()
            if run is not None:
                judged.recorded = record(ledger, run["id"], item.candidate, item.config,
                                         verdict.to_json(with_times=True), idea_id)
                if judged.counters and judged.counters.get("available"):
                    from ratchet.run.record import attach_counters

                    attempt = next(a for a in ledger.attempts(run["id"]) if a["seq"] == judged.recorded["attempt_seq"])
                    attach_counters(ledger, attempt["id"], judged.counters)
        results.append(judged)
        if on_result is not None:
            on_result(judged)

    judge_in_order(next_item, judge_one, commit, [options])
    return results


def batch_options(device: str, **fields) -> JudgeOptions:
    """Judge options for judging files in a row: on a GPU with a device lock, so the next files compile
    and check while one is timed alone."""
    from ratchet.judge.device_lock import DeviceLock

    return JudgeOptions(device=device, device_lock=DeviceLock() if device == "cuda" else None, **fields)


def worst_exit_code(results: Sequence[Judged]) -> int:
    """2 if any file is an error (refused ones included), else 1 if any failed, else 0."""
    return max((r.verdict.exit_code for r in results), default=0)


def save_candidate(source: str, directory: Path) -> Path:
    """Write candidate source sent by an agent to a file named by its hash (the judge reads files)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"cand_{hashlib.sha256(source.encode()).hexdigest()[:12]}.py"
    if not path.exists():
        path.write_text(source)
    return path


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def judge(ledger_path: Path, task_spec: str, candidate_path: str, config: Mapping[str, Any] | None = None,
          run_id: str | None = None, idea_id: int | None = None, device: str | None = None) -> dict[str, Any]:
    """Judge a candidate file (the MCP tool); with ``run_id``, record it in the run (the keep rule applies).

    Returns the verdict JSON (without raw times), plus ``kept`` and the attempt's place in the run
    when recorded. ``device`` is the default when there is no run; a run judges on its own device.
    A file that cannot be judged raises its one-line error (CandidateError, LedgerError).
    """
    if run_id is None:
        if idea_id is not None:
            raise LedgerError("an idea is linked only to an attempt recorded in a run (give run)")
        (judged,) = judge_files(load_task(task_spec), [candidate_path], batch_options(device or default_device()),
                                config)
        _raise_refused(judged)
        return {**judged.to_json(), "kept": None}
    with Ledger(ledger_path, create=False) as ledger:
        run = ledger.get_run(run_id)
        task = task_for_run(run, task_spec)
        _require_device(run["device"])
        (judged,) = judge_files(task, [candidate_path], batch_options(run["device"]), config, ledger, run, idea_id)
    _raise_refused(judged)
    return judged.to_json()


def _raise_refused(judged: Judged) -> None:
    if judged.error is not None:
        raise judged.error


def _require_device(device: str) -> None:
    if device == "cuda" and default_device() != "cuda":
        raise LedgerError("this run judges on cuda, and no CUDA device is present on this machine")


# -- ideas ------------------------------------------------------------------------------------------


def add_idea(ledger: Ledger, task_spec: str, text: str, author: str = AGENT) -> dict[str, Any]:
    task = load_task(task_spec).name
    return ledger.get_idea(ledger.add_idea(task, text, author=author))


def list_ideas(ledger_path: Path, task_spec: str) -> list[dict[str, Any]]:
    task = load_task(task_spec).name
    if not Path(ledger_path).exists():
        return []
    with Ledger(ledger_path, create=False) as ledger:
        return ledger.ideas(task)


# -- program.md -------------------------------------------------------------------------------------


def task_spec_for(run: Mapping[str, Any]) -> str:
    """How commands name the run's task: the built-in name when it is one, else the task file."""
    builtin = BUILTIN_TASKS_DIR / run["task"] / "task.py"
    if run["task"] in builtin_task_names() and Path(run["task_path"]).resolve() == builtin.resolve():
        return run["task"]
    return run["task_path"]


def program_text(task: Task, run: Mapping[str, Any], ledger_flag: str = "", ledger: Ledger | None = None,
                 start_files: tuple[str, ...] = ()) -> str:
    """The ``program.md`` an outside agent follows for one run: goal, loop, commands, rules.

    Written for the run's device and device name, on any machine: a cuda run's shapes, floors (datasheet
    leads or cached measured ceilings, named as such) and the reference times the ledger holds for that
    GPU. ``start_files`` are named as starting points besides the task's seeds."""
    from ratchet.agents import judge_facts
    from ratchet.agents.brief import device_targets, kernel_signature
    from ratchet.judge.verdict import ERROR_CODES, FAIL_CODES

    spec = shlex.quote(task_spec_for(run))
    rid, device = run["id"], run["device"]
    lf = ledger_flag
    shapes = task.shape_set(device)
    signature = kernel_signature(task)
    goal = (f"reach {run['goal_speedup']:g}x over the reference (weighted geometric mean over the shapes)"
            if run.get("goal_speedup") else "as fast as you can make it; only verified wins are kept")
    held = ""
    if shapes.held_out is not None:
        held = (f" Held-out shapes are drawn at every evaluation from {dict(shapes.held_out.dims)} "
                f"({shapes.held_out.count} per dtype): your kernel must handle any size, odd ones included.")
    forbidden = ", ".join(f"`{op}`" for op in task.forbidden) or "none for this task"
    cpu_shapes = ""
    if device != "cpu" and task.cpu is not None:
        cpu_shapes = f" The CPU check runs {', '.join(str(dict(s)) for s in task.cpu.public)}"
        if any("W" in s for s in task.cpu.public):  # a module task narrowed for the CPU (ratchet.e2e.narrow)
            cpu_shapes += (" (W: the model's module rebuilt at that hidden width, its other widths cut to match: "
                           "take every width from the arguments' shapes)")
        cpu_shapes += "."
    dtypes = ", ".join(str(d).removeprefix("torch.") for d in task.dtypes)
    fail_rows = "\n".join(f"| `{code}` | fail | {text} |" for code, text in FAIL_CODES.items())
    error_rows = "\n".join(f"| `{code}` | error | {text} |" for code, text in ERROR_CODES.items()
                           if code not in CODES_NOT_FOR_AGENTS)
    reference = _reference_source(task)
    languages = ("The kernel may be Triton, CUDA C++ (below), CuPy, or plain torch." if device == "cuda" else
                 "On the CPU the kernel is plain torch or C++ built with `ratchet.cuda_build.load_cached` "
                 "(Triton runs only in its slow interpreter there).")
    cpu_note = " CPU times say nothing about GPUs." if device == "cpu" else ""
    seeds = ", ".join(f"`{p}`" for p in (*start_files, *_seed_paths(task, device))) or "none"
    targets = device_targets(task, ledger, device, run.get("device_name") or None)
    timing = "\n".join(judge_facts.timing_protocol(device))
    cheap = "\n".join(judge_facts.correctness_only_check(spec, " (`--no-timing` is refused with `--run`)"))
    arch = judge_facts.gpu_arch(run.get("device_name"))
    check = judge_facts.compile_check(spec, arch)
    return f"""# Ratchet program: `{task.name}` on {device}, run `{rid}`

You are optimizing one GPU kernel of LLM inference under Ratchet. You write candidate kernels; Ratchet's
judge (trusted code you do not touch) checks each one for correctness on fresh random inputs, public and
held-out shapes and every dtype, guards against measurement tricks, and times it against the task's
reference in the same session. The run keeps a new best only when it is faster beyond the measured noise
on the task's shapes and slower on none (ties go to simpler code). Every attempt is recorded, failures too.

## Goal

{task.description or task.name}

Goal of this run: {goal}. Device: `{device}` ({run.get('device_name', '')}).{cpu_note}

## The loop

1. Read the brief (task, shapes, the best so far and its code, recent failures, pending ideas):
   `ratchet context {spec} --run {rid}{lf}`
2. Write one candidate file (rules below), e.g. `candidates/{task.name}_001.py`. Change one thing at a time.
3. Before spending GPU time, on any machine: check correctness on the CPU shapes
   (`TRITON_INTERPRET=1 ratchet eval {spec} FILE --device cpu --no-timing --json`) and, for Triton or
   CUDA C++, that it compiles for the GPU (`ratchet check {spec} FILE --arch {arch}`, and with
   `--shapes gpu` if your code branches on sizes the CPU shapes do not reach). Fix what fails.
4. Judge it and record it in the run:
   `ratchet eval {spec} candidates/{task.name}_001.py --run {rid}{lf} --json`
   (`--config '{{"BLOCK": 1024}}'` picks a point of its SPACE; `--idea ID` links the attempt to an idea).
   With `--json`, stdout holds exactly one JSON object, for errors too; the line on stderr is for people
   (read stdout alone: `2>&1` mixes them).
5. Read the verdict: `verdict` (pass / fail / error), `reasons` (codes below, with details), `speedup`
   (weighted geometric mean over the shapes, against the reference timed beside it), per-shape rows in
   `shapes`, and `kept` / `keep_reason` (whether it became the run's best, and why or why not).
6. Write down what to try next, and what you learned: `ratchet idea add {spec} "..."{lf}`;
   `ratchet idea list --task {spec}{lf}` shows each idea's outcome.
7. Repeat from 1. Stop at the goal, or when ideas run out.

## Commands of this run

| what | command |
| --- | --- |
| brief | `ratchet context {spec} --run {rid}{lf}` |
| judge and record | `ratchet eval {spec} FILE --run {rid}{lf} [--config JSON] [--idea ID] [--json]` |
| judge only (not recorded) | `ratchet eval {spec} FILE --device {device} [--json]` |
| correctness only, on the CPU (seconds) | `TRITON_INTERPRET=1 ratchet eval {spec} FILE --device cpu --no-timing --json` |
| compile for the GPU, no GPU needed | `ratchet check {spec} FILE --arch {arch}` |
| history | `ratchet show {rid}{lf} [--json]` |
| ideas | `ratchet idea add {spec} "TEXT"{lf}`, `ratchet idea list --task {spec}{lf}` |
| the best, as one file | `ratchet best {rid} -o best.py{lf}` |

Exit status of `ratchet eval`: 0 pass, 1 fail, 2 error or bad usage (one line on stderr, e.g. a
duplicate: the same source and config is judged once per run).

## The device: `{device}` ({run.get('device_name', '')})

{targets}

## How the judge times

{timing}

## Checks that cost no GPU time

{cheap}
- {check}

## Candidate files

- Define `{signature}` with exactly the reference's parameters, returning what the reference
  returns: same structure, shapes, dtypes (the input's dtype unless the task says otherwise) and device.
- Optional `SPACE = {{"BLOCK": [256, 512, 1024]}}`: a literal dict of non-empty lists. A config picks one
  value per key and arrives as keyword arguments (`kernel(..., BLOCK=512)`); the first values are the
  default. Optional `CONSTRAINTS = ["BLOCK % 32 == 0"]`: expressions over SPACE names every config meets.
- {languages}
- {judge_facts.cuda_cpp_rule()}
- Starting points (known-good seeds of this task): {seeds}.
- Dtypes judged: {dtypes}. Shapes on {device}: {', '.join(str(dict(s)) for s in shapes.public)}.{held}{cpu_shapes}
- Ops the kernel may not run (seen by the profiler, fallbacks included): {forbidden}.
- Outputs must be plain dense tensors with their own storage; inputs must stay unchanged.

The reference (`{task.source_path}`):

```python
{reference}
```

## What the judge refuses

| code | verdict | meaning |
| --- | --- | --- |
{fail_rows}
{error_rows}

## Honest measurement

- No timing games: no work left on other streams or threads after return, no caching by pointer, shape
  or values, no behaving differently in warm-up, on checked calls or when profiled, no touching timers,
  the harness or the result channel, no lower precision than the dtype allows, no special cases for the
  public shapes. The judge checks outputs of random timed calls and held-out shapes; such tricks fail.
- Allowed, as in any serving stack: scratch buffers (`torch.empty`) made in each call or kept between
  calls and refilled each call; lookup tables built once from shapes or constants (not from input
  values); several launches; cross-program cooperation inside one launch (atomics, a grid-wide barrier
  on a counter the same launch resets), if it cannot deadlock when fewer programs are resident than the
  grid holds. Not allowed: reusing a result across calls (outputs are checked on random timed calls).
- Do not edit Ratchet, its task files or the ledger. A run judges with its own task file and device;
  `--allow` and `--no-timing` are refused with `--run`.
- A result faster than the device's measured ceilings allow is rejected (`beyond_roofline`): be
  suspicious of big wins and look for the bug first.
- Report what the judge said, failures included. The ledger keeps every attempt.
"""


def _seed_paths(task: Task, device: str) -> list[str]:
    return [str(p) for p in task.seeds_for(device)]


def _reference_source(task: Task) -> str:
    from ratchet.agents.brief import reference_text

    text = reference_text(task)
    if text is not None:
        return text
    try:
        return textwrap.dedent(inspect.getsource(task.reference)).rstrip()
    except (OSError, TypeError):
        return f"# see {task.source_path}"


def ledger_flag(explicit: str | None) -> str:
    """`` --ledger PATH`` for the commands in program.md when the ledger is not the default one."""
    import os

    path = explicit or os.environ.get("RATCHET_LEDGER")
    return f" --ledger {shlex.quote(str(Path(path).resolve()))}" if path else ""
