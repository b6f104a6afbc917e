"""``ratchet optimize MODEL``: one campaign from a profile to gated, stacked kernels, resumable after a kill.

Stages, each recorded in the ledger (``ratchet.run.campaigns``) before the next starts:

1. profile: the model's decode and prefill steps (``ratchet.e2e.profile``); the ops worth a run are the
   built-in tasks the model calls, the extractable ops with no task (task files written by
   ``ratchet.e2e.extract`` under ``<ledger dir>/campaigns/<id>/tasks``) and the model's own modules that
   run ops neither covers (an MoE block, a GELU MLP: task files whose reference is the module, written by
   ``ratchet.e2e.extract_module`` beside them), each from ``MIN_SCORE`` of the weighted step time on, in
   Amdahl order (largest share first). When other ops are planned too, a module's share in the
   projection is only its time in ops no task or extractor covers (its GEMMs may be planned as
   ``linear``), so no time counts twice; planned alone (``--ops GemmaMLP``), it is all of its time;
2. plan: the attempt budget (or the time) is shared by the gain each op can still give: its share of
   the step, which is what Amdahl's law says making it free saves. Every planned op gets at least one
   attempt, and at least one per ``--seed`` file the user gave for it (a file the user asked for is always
   judged, even past the budget); when the budget is smaller than the ops, the largest shares go first. When an op's run
   starts, it gets its share of the attempts still unspent among the ops not started yet, so attempts a
   run did not use (goal reached, search space exhausted) go to the others;
3. runs: each op's run through the loop's own API (``start_or_resume``: the task's seeds, or the
   extracted task's plain-torch seed, with the chosen proposer). A run is created with the campaign's
   id in its options (one transaction), so a run interrupted at any point is found and resumed, never
   started twice, and the loop's ledger discipline keeps its attempts whole;
4. gate: every run's best kernel on the user's model (``ratchet.e2e.gate``: decode at the chosen
   contexts and batches, CUDA graphs on a GPU, prefill, logits). A module task's kernel goes in as its
   modules' forward (``ratchet.e2e.models.module_route``). Extracted tasks (GEMMs, prefill attention,
   grouped GEMMs) run outside the op registry, so their kernels cannot be gated in the model and are
   reported as such, with their own speedup;
5. stack: the kernels that passed, applied together (``ratchet.e2e.stack``): the measured speed-up.

The campaign stops proposing once the model's projected speed-up (Amdahl over the op shares with each
run's best speedup) reaches ``--target`` or the time is spent; it still gates and stacks what it has.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ratchet.report.terminal import make_console, show
from ratchet.run import campaigns as store
from ratchet.run.keep import KeepPolicy
from ratchet.run.ledger import Ledger, LedgerError

MIN_SCORE = 0.002  # an op below this weighted share of the step is not worth a run
DEFAULT_BUDGET = 24  # attempts over the whole campaign when neither --budget nor --time is given


class CampaignError(Exception):
    """The campaign cannot run as asked; one line, exit 2."""


@dataclass(frozen=True)
class CampaignRequest:
    model: str
    device: str = "cpu"
    size: str = "tiny"
    target: float | None = None
    budget: int | None = None
    seconds: float | None = None
    proposer: str = "tune"
    sampler: str = "tpe"
    contexts: tuple[int, ...] | None = None
    batches: tuple[int, ...] | None = None
    prefill: tuple[tuple[int, int], ...] | None = None
    ops: tuple[str, ...] | None = None  # only these: task names, extracted families ("linear"), module classes
    # (op, file): the user's own candidate files (an agent's kernel, say), judged first in that op's run
    # beside its seeds; op as --ops names it
    seeds: tuple[tuple[str, str], ...] = ()
    profile: dict = field(default_factory=dict)  # batch, context, prefill, steps for the profile
    llm: dict | None = None  # LLMSettings as a dict, with proposer "llm"
    executor: str = "local"  # where the runs' evaluations go: "local" or "ray" (docs/scale.md)
    address: str | None = None  # with "ray": the cluster

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PlannedOp:
    op: str  # the task name (built-in) or the extracted task's name
    kind: str  # "builtin" | "extracted" | "module"
    task: str  # what ratchet run takes: a built-in name or a task file
    seeds: tuple[str, ...]  # () = the task's own seeds for the device
    score: float
    decode_share: float
    budget: int | None
    seconds: float | None


def profile_settings(request: CampaignRequest) -> dict:
    """What the profile runs: ``request.profile`` where it says, else the largest decode batch and context
    the campaign gates at and its prefill (``()``, none: no prefill profiled; else the longest), so the
    tasks extracted from the profile hold the shapes the model is gated at (held-out from 1 up to them);
    what neither says, the size's defaults. A campaign gated at batches 1 and 32 with no prefill had been
    profiled at batch 8 with a 2048-token prefill, so its MoE block's task judged 2048-token calls and
    never batch 32 (2026-12-07)."""
    p = dict(request.profile)
    if "batch" not in p and request.batches:
        p["batch"] = max(request.batches)
    if "context" not in p and request.contexts:
        p["context"] = max(request.contexts)
    if "prefill" not in p and request.prefill is not None:
        p["prefill"] = max((tokens for _batch, tokens in request.prefill), default=0)
    return p


def projected_speedup(plan: list[dict], bests: dict[str, float | None]) -> float:
    """Amdahl over the decode shares: each op with a best speedup k > 1 takes 1/k of its share."""
    rest = 1.0
    for p in plan:
        k = bests.get(p["op"])
        if k and k > 1:
            rest -= p["decode_share"] * (1 - 1 / k)
    return 1.0 / rest if rest > 0 else math.inf


def share_budget(entries: list[dict], budget: int | None, seconds: float | None) -> list[dict]:
    """Each entry's attempts (or seconds) in proportion to its score; at least one attempt each, the
    largest scores first when there are more ops than attempts. An entry's attempts are never fewer than
    the user's files for it (``starts``): those are judged whatever the budget."""
    total = sum(e["score"] for e in entries) or 1.0
    out = []
    if budget is not None:
        entries = entries[:budget]
        total = sum(e["score"] for e in entries) or 1.0
        shares = [max(1, math.floor(budget * e["score"] / total)) for e in entries]
        left = budget - sum(shares)
        for i in range(len(shares)):  # what the floors left over goes to the largest first
            if left <= 0:
                break
            shares[i] += 1
            left -= 1
        while sum(shares) > budget:  # the minimum of one each overshot: trim the smallest
            j = max(i for i, s in enumerate(shares) if s > 1) if any(s > 1 for s in shares) else len(shares) - 1
            shares[j] -= 1
            if shares[j] == 0:
                shares.pop(j)
                entries = entries[:j] + entries[j + 1:]
        for e, s in zip(entries, shares):
            out.append({**e, "budget": max(s, len(e.get("starts", ()))), "seconds": None})
    else:
        for e in entries:
            out.append({**e, "budget": None, "seconds": seconds * e["score"] / total})
    return out


def _dtype_not_judged(ranked) -> str | None:
    """Why a built-in task's kernel could never run in the model, if the dtypes say so: the model calls
    the op only in dtypes the task does not judge (decode attention in a float32 CPU model, say)."""
    from ratchet.task import load_task

    judged = {str(d).removeprefix("torch.") for d in load_task(ranked.task).dtypes}
    used = {row.get("dtype") for rows in ranked.shapes.values() for row in rows if row.get("dtype")}
    if not used or used & judged:
        return None
    return (f"the model runs it in {', '.join(sorted(used))}, which its task does not judge "
            f"({', '.join(sorted(judged))}), so an exported package would never run its kernel")


def _why_no_kernel(attempts: list[dict]) -> str:
    """"no kept kernel", and why: the verdicts its attempts got (the first failure's reason, since a run
    whose every attempt failed the same way, its own reference seed included, says the task is the trouble)."""
    if not attempts:
        return "no kept kernel: no attempt was judged"
    said = ", ".join(f"{n} {verdict}" for verdict, n in Counter(a["verdict"] for a in attempts).items())
    failed = next((a for a in attempts if a["verdict"] != "pass" and a.get("reasons")), None)
    if failed is None:
        return f"no kept kernel: {said}, none faster than the reference"
    reason = failed["reasons"][0]
    detail = ((reason.get("detail") or "").strip().splitlines() or [""])[0][:160]
    return f"no kept kernel: {said}; first failure {reason['code']}" + (f": {detail}" if detail else "")


class Campaign:
    def __init__(self, ledger: Ledger, cid: str, gates_dir: Path, console: Console | None = None,
                 executor=None) -> None:
        self.ledger, self.cid, self.gates_dir = ledger, cid, Path(gates_dir)
        # An ExecutorChoice given on --resume: the runs go on there (another cluster), else where they began.
        self.executor = executor
        self.console = console or make_console()
        row = store.get_campaign(ledger, cid)
        self.request = CampaignRequest(**{**row["options"],
                                          **{k: _tuple(row["options"].get(k)) for k in ("contexts", "batches", "ops")},
                                          "prefill": _pairs(row["options"].get("prefill")),
                                          "seeds": _pairs(row["options"].get("seeds")) or ()})
        self.state: dict[str, Any] = row["state"]
        self.started = time.monotonic()

    # -- state -----------------------------------------------------------------------------------------
    def save(self) -> None:
        store.save_state(self.ledger, self.cid, self.state)

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)

    @property
    def folder(self) -> Path:
        return self.gates_dir.parent / "campaigns" / self.cid

    # -- stages ----------------------------------------------------------------------------------------
    def run(self) -> dict:
        store.set_status(self.ledger, self.cid, "running")
        try:
            if "plan" not in self.state:
                self.profile_and_plan()
            reason = self.run_ops()
            self.gate_all()
            self.stack()
        except KeyboardInterrupt:
            store.set_status(self.ledger, self.cid, "stopped", "interrupted (Ctrl-C); resume with --resume")
            raise
        except CampaignError as exc:  # what was recorded stays; a resume starts again where it stopped
            store.set_status(self.ledger, self.cid, "stopped", f"failed: {exc}")
            raise
        self.state["stop_reason"] = reason
        self.save()
        store.set_status(self.ledger, self.cid, "done", reason)
        self.view(final=True)
        return self.summary()

    def profile_and_plan(self) -> None:
        from ratchet.e2e.extract import extract_tasks
        from ratchet.e2e.extract_module import extract_module_tasks, module_task_name
        from ratchet.e2e.model_shapes import task_for_model
        from ratchet.e2e.profile import ProfileError, profile_workload

        r = self.request
        self.say(f"campaign {self.cid}: profiling {r.model} on {r.device}")
        p = profile_settings(r)
        try:
            prof = profile_workload(r.model, r.size, r.device, p.get("batch"), p.get("context"), p.get("prefill"),
                                    p.get("steps"))
        except ProfileError as exc:
            raise CampaignError(str(exc)) from None
        decode = prof.phase("decode")
        entries = []
        for ranked in prof.worth_a_run:
            why = _dtype_not_judged(ranked)
            if why and ranked.task not in (r.ops or ()):
                # Its kernel could pass its task but never its gate (no_judged_calls): no budget for it.
                self.say(f"campaign {self.cid}: {ranked.task} not planned: {why}")
                continue
            if why:
                self.say(f"campaign {self.cid}: {ranked.task} planned as --ops asks, but {why}")
            entries.append({"op": ranked.task, "kind": "builtin", "task": ranked.task, "seeds": [],
                            "score": ranked.score, "decode_share": ranked.shares.get("decode", ranked.score)})
        extracted = {}
        if prof.no_task:
            for e in extract_tasks(prof, self.folder / "tasks", force=True):
                extracted[e.family] = e
        for ranked in prof.no_task:
            e = extracted.pop(ranked.extractor, None) if ranked.extractor else None
            if e is not None:
                entries.append({"op": e.name, "kind": "extracted", "task": e.path, "seeds": [e.seed],
                                "family": e.family, "score": ranked.score,
                                "decode_share": ranked.shares.get("decode", ranked.score)})
        if prof.modules_no_task:
            written, skipped = extract_module_tasks(prof, self.folder / "tasks", force=True, batches=r.batches or ())
            tasks = {e.name: e for e in written}
            for s in skipped:
                self.say(f"campaign {self.cid}: module {s.name} has no task: {s.why}")
            for ranked in prof.modules_no_task:
                e = tasks.get(module_task_name(prof.workload, ranked.name))
                if e is not None:
                    entries.append({"op": e.name, "kind": "module", "task": e.path, "seeds": [e.seed],
                                    "family": ranked.name.rsplit(".", 1)[-1], "score": ranked.score,
                                    "decode_share": ranked.uncovered_shares.get("decode", 0.0),
                                    "module_share": ranked.shares.get("decode", 0.0)})
        for op, path in r.seeds:  # the user's files come first: the run judges them before its own seeds
            matched = [e for e in entries if op in (e["op"], e.get("family"))]
            if not matched:
                raise CampaignError(f"--seed {op}={path}: {r.model} runs no op named {op!r} (ops: "
                                    f"{', '.join(sorted({e.get('family') or e['op'] for e in entries}))})")
            for e in matched:
                e["starts"] = [*e.get("starts", []), path]
        if r.ops:  # asked for by name: taken whatever their share
            entries = [e for e in entries if e["op"] in r.ops or e.get("family") in r.ops]
            if not entries:
                raise CampaignError(f"none of --ops {','.join(r.ops)} is an op {r.model} runs")
        else:
            entries = [e for e in entries if e["score"] >= MIN_SCORE]
        if not entries:
            raise CampaignError(f"{r.model}: no op takes {MIN_SCORE:.1%} of a step; nothing to optimize")
        # A built-in task judges the shapes of the models it was written for; the user's model's other
        # shapes of the op are added, or its package would run the model's own op there (model_shapes).
        profiled = {ranked.task: ranked.shapes for ranked in prof.worth_a_run}
        for e in entries:
            if e["kind"] == "builtin":
                e["task"] = task_for_model(e["task"], r.device, profiled.get(e["op"], {}), self.folder / "tasks",
                                           str(r.model))
        if all(e["kind"] == "module" for e in entries):  # nothing else planned: all of its time is its own
            for e in entries:
                e["decode_share"] = e["module_share"]
        # Built-in tasks and module tasks first, then by share: only their kernels can be gated into the
        # model (an extracted op's kernel is reported "not gated"), so when the budget cannot reach every
        # op, the attempts go where they can speed the model up.
        entries.sort(key=lambda e: (e["kind"] == "extracted", -e["score"]))
        budget = r.budget if r.budget is not None or r.seconds is not None else DEFAULT_BUDGET
        self.state["plan"] = share_budget(entries, budget, r.seconds)
        self.state["profile"] = {"step_us": {ph.name: ph.step_us for ph in prof.phases},
                                 "decode_step_us": decode.step_us if decode else None,
                                 "other_share": {ph.name: ph.other_share for ph in prof.phases}}
        self.state["runs"] = {}
        self.state["gates"] = {}
        store.save_profile(self.ledger, self.cid, prof.to_json())
        self.save()

    def _runs_by_op(self) -> dict[str, dict]:
        return {run["options"].get("campaign_op", run["task"]): run
                for run in store.campaign_runs(self.ledger, self.cid)}

    def bests(self) -> dict[str, float | None]:
        return {op: run["best_speedup"] for op, run in self._runs_by_op().items()}

    def run_ops(self) -> str:
        from ratchet.run.run_command import RunRequest, start_or_resume

        r = self.request
        for planned in self.state["plan"]:
            projected = projected_speedup(self.state["plan"], self.bests())
            if r.target and projected >= r.target:
                return f"target {r.target:g}x reached (projected {projected:.3f}x)"
            if r.seconds is not None and time.monotonic() - self.started >= r.seconds:
                return "time budget spent"
            run = self._runs_by_op().get(planned["op"])
            if run is not None and run["status"] == "done":
                continue
            self.view()
            if run is None:
                planned = self._rebudget(planned)
            run_id = run["id"] if run is not None else self._create_run(planned)
            self.state["runs"][planned["op"]] = run_id
            self.save()
            code = start_or_resume(self.ledger, RunRequest(task=None, resume=run_id, executor=self.executor),
                                   console=self.console)
            if code == 130:
                raise KeyboardInterrupt
        return "every planned op ran its budget"

    def _rebudget(self, planned: dict) -> dict:
        """An op about to start gets its share of the attempts still unspent, among the ops not started
        yet: attempts an earlier run left (it stopped at its goal, or its search space ran out) go on to
        the gain the others can still give."""
        total = self.request.budget
        if total is None:
            return planned
        runs = self._runs_by_op()
        spent = sum(run["attempts"] if run["status"] == "done" else (run["budget_attempts"] or 0)
                    for run in runs.values())
        waiting = [p for p in self.state["plan"] if p["op"] not in runs]
        weight = sum(p["score"] for p in waiting) or 1.0
        left = max(total - spent, len(waiting))
        return {**planned, "budget": max(1, len(planned.get("starts", ())), round(left * planned["score"] / weight))}

    def _create_run(self, planned: dict) -> str:
        from ratchet.e2e.gate import device_name
        from ratchet.candidate import load_candidate
        from ratchet.run.loop import load_seeds
        from ratchet.task import load_task

        r = self.request
        task = load_task(planned["task"])
        # load_seeds(task, []) is the task's own seeds; the user's files go before them
        seeds = [load_candidate(path) for path in planned.get("starts", [])] + load_seeds(
            task, list(planned["seeds"]), r.device)
        if not seeds:
            raise CampaignError(f"task '{task.name}' has no seeds for {r.device}")
        from ratchet.run.executor import ExecutorChoice

        gpus = [0] if r.device == "cuda" and r.executor == "local" else []
        options = {"seeds": [c.path for c in seeds], "sampler": r.sampler, "gpus": gpus, "campaign": self.cid,
                   **ExecutorChoice(r.executor, r.address).to_options(),
                   "campaign_op": planned["op"], **({"llm": r.llm} if r.proposer == "llm" and r.llm else {})}
        run_id = self.ledger.create_run(task=task.name, task_path=task.source_path or task.name, device=r.device,
                                        device_name=device_name(r.device), proposer=r.proposer,
                                        budget_attempts=planned["budget"], budget_seconds=planned["seconds"],
                                        options=options)
        store.attach_run(self.ledger, run_id, self.cid)
        return run_id

    def grid(self):
        from ratchet.e2e.gate import default_grid

        r = self.request
        grid = default_grid(r.size)
        if r.contexts:
            grid = replace(grid, contexts=r.contexts, extra_contexts=())
        if r.batches:
            grid = replace(grid, batches=r.batches)
        if r.prefill is not None:
            grid = replace(grid, prefill=r.prefill)
        return grid

    def gate_all(self) -> None:
        from ratchet.e2e.gate import GateError, GateRequest, read_gate, run_gate
        from ratchet.e2e.workloads import OPS
        from ratchet.run.ledger import config_key

        r = self.request
        from ratchet.e2e.gate import gated_best

        kinds = {p["op"]: p["kind"] for p in self.state["plan"]}

        for op, run in self._runs_by_op().items():
            best = gated_best(self.ledger, run["id"], r.device)
            if best is None:
                self.state["gates"][run["id"]] = {"op": op, "verdict": "none",
                                                  "detail": _why_no_kernel(self.ledger.attempts(run["id"]))}
                continue
            if run["task"] not in OPS and kinds.get(op) != "module":
                # A module task's kernel replaces its modules (e2e.models.module_route); an extracted op
                # (a Linear, a GEMM family) runs where no registry reaches.
                self.state["gates"][run["id"]] = {"op": op, "verdict": "not gated", "detail": (
                    "an extracted task: the model runs this op outside the op registry, so its kernel cannot be "
                    "put into the model")}
                continue
            if not best["speedup"] or best["speedup"] <= 1.0 + KeepPolicy().min_noise:
                # A run's first passing attempt is its best until something beats it, even when it is slower
                # than the reference: such a kernel would slow the model, so it is neither gated nor exported.
                # Nor is one within the keep rule's least noise of it (a module task's own plain-torch seed
                # judged 1.0002x against itself on the CPU, 2026-12-07, and was gated).
                self.state["gates"][run["id"]] = {"op": op, "verdict": "none", "detail": (
                    f"its best ({best['speedup'] or 0:.3f}x the reference, attempt {best['seq']}) is no win")}
                continue
            done = read_gate(self.gates_dir, run["id"], r.model, r.size, r.device)
            if done and (done["attempt"]["source_sha256"], done["attempt"]["config_key"]) == (
                    best["source_sha256"], config_key(best["config"])):
                self.state["gates"][run["id"]] = _gate_summary(op, done)
                continue
            self.say(f"campaign {self.cid}: gating {op} (run {run['id']}, attempt {best['seq']}, "
                     f"{best['speedup']:.3f}x) on {r.model}")
            try:
                result = run_gate(self.ledger, GateRequest(run=run["id"], workload=r.model, size=r.size,
                                                           device=r.device, grid=self.grid()), self.gates_dir)
            except GateError as exc:
                self.state["gates"][run["id"]] = {"op": op, "verdict": "error", "detail": str(exc)}
                continue
            self.state["gates"][run["id"]] = _gate_summary(op, result.to_json())
            self.save()
        self.save()

    def stack(self) -> None:
        from ratchet.e2e.stack import StackError, StackRequest, default_setting, run_stack

        r = self.request
        passed = [run for run, g in self.state["gates"].items() if g.get("verdict") == "pass"]
        if not passed:
            self.state["stack"] = {"measured": None, "detail": "no kernel passed its gate: nothing to stack"}
            self.save()
            return
        batch, context = default_setting(r.size)
        grid = self.grid()
        batch = max(grid.batches) if r.batches else batch
        context = max(grid.contexts) if r.contexts else context
        self.say(f"campaign {self.cid}: stacking {len(passed)} gated kernel(s) on {r.model}, batch {batch}, "
                 f"context {context}")
        try:
            result = run_stack(self.ledger, StackRequest(workload=r.model, runs=tuple(passed), size=r.size,
                                                         device=r.device, batch=batch, context=context,
                                                         compile=r.device == "cuda", grid=grid,
                                                         no_compile_why="a campaign on a CPU stacks without "
                                                         "compiling: Inductor takes minutes there"),
                               self.gates_dir)
        except StackError as exc:
            self.state["stack"] = {"measured": None, "detail": str(exc)}
            self.save()
            return
        data = result.to_json()
        kernels = [layer for layer in data["layers"] if layer["kind"] in ("baseline", "kernel")]
        self.state["stack"] = {"measured": kernels[0]["step_us"] / kernels[-1]["step_us"], "batch": batch,
                               "workload": data["workload"], "size": data["size"], "device": data["device"],
                               "context": context, "layers": data["layers"], "notes": data["notes"],
                               "speedup_vs_reference": data["speedup_vs_reference"]}
        self.save()

    # -- views -----------------------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        runs = self._runs_by_op()
        out = []
        for p in self.state.get("plan", []):
            run = runs.get(p["op"])
            gate = self.state.get("gates", {}).get(run["id"]) if run else None
            # One best per kind of device the run was timed on (a cluster of mixed GPUs): never compared.
            kinds = self.ledger.bests_by_device(run["id"]) if run else {}
            out.append({"op": p["op"], "kind": p["kind"], "score": p["score"], "decode_share": p["decode_share"],
                        "budget": p["budget"], "seconds": p["seconds"], "run": run["id"] if run else None,
                        "status": run["status"] if run else "planned", "attempts": run["attempts"] if run else 0,
                        "best_speedup": run["best_speedup"] if run else None,
                        "best_by_device": {k: {"seq": b["seq"], "speedup": b["speedup"]} for k, b in kinds.items()},
                        "gate": gate.get("verdict") if gate else None})
        return out

    def summary(self) -> dict:
        stack = self.state.get("stack") or {}
        return {"campaign": self.cid, "model": self.request.model, "device": self.request.device,
                "target": self.request.target, "ops": self.rows(),
                "projected_speedup": projected_speedup(self.state.get("plan", []), self.bests()),
                "measured_speedup": stack.get("measured"), "stack": stack,
                "stop_reason": self.state.get("stop_reason"), "gates": self.state.get("gates", {})}

    def view(self, final: bool = False) -> None:
        table = Table(title=f"campaign {self.cid}: {self.request.model} ({self.request.device})"
                      + (" - summary" if final else ""))
        for col in ("op", "kind", "share", "if free", "budget", "run", "status", "attempts", "best", "gate"):
            table.add_column(col)
        for row in self.rows():
            share = row["decode_share"]
            free = "unbounded" if share >= 1 else f"{1 / (1 - share):.3f}x"
            budget = str(row["budget"]) if row["budget"] is not None else f"{row['seconds']:.0f}s"
            best = f"{row['best_speedup']:.3f}x" if row["best_speedup"] else "-"
            table.add_row(row["op"], row["kind"], f"{100 * share:.1f}%", free, budget, row["run"] or "-",
                          row["status"], str(row["attempts"]), best, row["gate"] or "-")
        show(self.console, table)
        summary = self.summary()
        measured = summary["measured_speedup"]
        target = f", target {self.request.target:g}x" if self.request.target else ""
        self.say(f"model speed-up: projected {summary['projected_speedup']:.3f}x (Amdahl over the ops' best "
                 f"speedups), measured {f'{measured:.3f}x' if measured else '-'} (stack of the gated kernels)"
                 f"{target}")
        if final:
            for run_id, g in summary["gates"].items():
                if g.get("verdict") != "pass":
                    self.say(f"- {g['op']} ({run_id}): {g.get('verdict')}: {g.get('detail', '')}")
            for note in (self.state.get("stack") or {}).get("notes", []):
                self.say(f"- {note}")
            if summary["stop_reason"]:
                self.say(f"stopped: {summary['stop_reason']}")
            self.say(f"export: ratchet export {self.cid} -o DIR")


def _gate_summary(op: str, gate: dict) -> dict:
    return {"op": op, "verdict": "pass" if gate.get("passed") else "fail", "file": gate.get("gate_file"),
            "detail": "; ".join(f"{x['code']}: {x['detail']}" for x in gate.get("reasons", []))[:400],
            "attempt": gate.get("attempt", {}).get("seq")}


def _tuple(value):
    return tuple(value) if value is not None else None


def _pairs(value):
    return tuple(tuple(p) for p in value) if value is not None else None


def start_campaign(ledger: Ledger, request: CampaignRequest) -> str:
    from ratchet.e2e.models import ModelError, check_spec, kind_of

    try:
        check_spec(request.model)  # refused before a campaign is recorded, not when its first step fails
    except ModelError as exc:
        raise CampaignError(str(exc)) from None
    model = request.model
    if kind_of(model) != "builtin":
        model = str(Path(model).resolve()) if kind_of(model) == "transformers" else model
    return store.create_campaign(ledger, model, request.device, replace(request, model=model).to_json())


def resume_campaign(ledger: Ledger, cid: str) -> None:
    row = store.get_campaign(ledger, cid)
    if row["status"] == "done":
        raise LedgerError(f"campaign '{cid}' is finished ({row['stop_reason'] or 'done'}); start a new one")
