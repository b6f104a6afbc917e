"""The agent benchmark: operations of real inference stacks that Ratchet ships no task or seed for, each a
task file and a plain-torch start (``<op>/task.py``, ``<op>/start.py``), handed to an agent that must
invent the kernels.

  python benchmarks/agent_bench/agent_bench.py setup [--device cuda --device-name H200] [--ledger PATH]
      [--out DIR] [--ops min_p geglu ...] [--target 2x] [--compile-baseline]
      one run per op (proposer 'agent') and DIR/<op>/program.md + start.py for an outside coding agent;
      a cuda run can be set up on a machine without a GPU (it is judged later on the GPU it names).
  python benchmarks/agent_bench/agent_bench.py setup --proposer llm --llm-model NAME [--llm-base-url URL]
      [--budget 30] ...   drives one LLM-proposer run per op itself (the same flags as 'ratchet run').
  python benchmarks/agent_bench/agent_bench.py baseline [--device cuda] [--ledger PATH] [--ops ...]
      judges torch.compile of each op's reference as a normal attempt, in a run of its own (proposer
      'baseline'), so an agent's run never has to beat it to keep a win; needs the device.
  python benchmarks/agent_bench/agent_bench.py table [--ledger PATH] [--csv] [--device cuda]
      per op: attempts, passing fraction, best speedup over the reference and over torch.compile, judge
      minutes, failures by reason code.

Speedup over torch.compile is the ratio of two speedups over the reference, each measured against the
reference timed beside it in its own evaluation; where no baseline passed, the table says "not measured".
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = "baseline"  # the proposer name of torch.compile attempts
BENCHMARK = "agent_bench"


def ops() -> list[str]:
    """The benchmark's operations: every folder here with a task file."""
    return sorted(p.parent.name for p in HERE.glob("*/task.py"))


def task_path(op: str) -> Path:
    return HERE / op / "task.py"


def start_path(op: str) -> Path:
    return HERE / op / "start.py"


class BenchError(Exception):
    """Bad usage; one line, exit 2."""


# -- setup ---------------------------------------------------------------------------------------------


def setup(ledger_path: str | None, out: Path, device: str, device_name: str | None, chosen: list[str],
          target: float | None = None) -> list[dict]:
    """One agent run per op and DIR/<op>/program.md (+ start.py). Returns [{op, run, program}]."""
    from ratchet.agents import api
    from ratchet.cli.common import open_ledger
    from ratchet.task import load_task

    made = []
    with open_ledger(ledger_path) as ledger:
        for op in chosen:
            task = load_task(str(task_path(op)))
            folder = out / op
            folder.mkdir(parents=True, exist_ok=True)
            start = folder / "start.py"
            shutil.copyfile(start_path(op), start)
            run_id = api.create_agent_run(ledger, task, device, target, device_name,
                                          options={"benchmark": BENCHMARK, "op": op})
            run = ledger.get_run(run_id)
            program = folder / "program.md"
            program.write_text(api.program_text(task, run, api.ledger_flag(ledger_path), ledger,
                                                start_files=(str(start.resolve()),)))
            made.append({"op": op, "run": run_id, "program": str(program)})
    return made


def drive_llm(ledger_path: str | None, device: str, chosen: list[str], settings, budget: int,
              target: float | None) -> list[int]:
    """One LLM-proposer run per op through the product's run API; returns their exit codes."""
    from ratchet.cli.common import open_ledger
    from ratchet.run.run_command import RunRequest, start_or_resume

    codes = []
    with open_ledger(ledger_path) as ledger:
        for op in chosen:
            request = RunRequest(task=str(task_path(op)), seeds=(str(start_path(op)),), proposer="llm",
                                 budget=budget, target=target, device=device, llm=settings)
            codes.append(start_or_resume(ledger, request))
    return codes


# -- the torch.compile baseline ------------------------------------------------------------------------


def write_compile_candidate(op: str, folder: Path) -> Path:
    """A candidate file: torch.compile of the op's reference (one graph per shape), at the task's dtype."""
    import inspect

    from ratchet.task import load_task

    task = load_task(str(task_path(op)))
    names = ", ".join(inspect.signature(task.reference).parameters)
    text = f'''"""torch.compile of the {op} task's reference (written by agent_bench.py baseline): the baseline an
invented kernel is compared with. mode 'default', dynamic=False: one graph per shape."""

import torch
import torch._dynamo.config
import torch._inductor.config

from ratchet.task import load_task

# One compile thread: compile subprocesses would be children of the judge's worker (child_process).
torch._inductor.config.compile_threads = 1
for _name in ("recompile_limit", "cache_size_limit"):  # public and held-out shapes: one graph each
    if hasattr(torch._dynamo.config, _name):
        setattr(torch._dynamo.config, _name, 256)

_compiled = torch.compile(load_task({str(task_path(op))!r}).reference, dynamic=False)


def kernel({names}):
    return _compiled({names})
'''
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch_compile_{op}.py"
    path.write_text(text)
    return path


def require_device(device: str) -> None:
    from ratchet.agents import api

    if device == "cuda" and api.default_device() != "cuda":
        raise BenchError("the torch.compile baseline is judged on the device: no CUDA device is present here "
                         "(run 'baseline' on the GPU machine)")


def judge_baselines(ledger_path: str | None, device: str, chosen: list[str], folder: Path) -> list[dict]:
    """Judge each op's torch.compile candidate in a run of its own (proposer 'baseline')."""
    from ratchet.agents import api
    from ratchet.candidate import load_candidate
    from ratchet.cli.common import open_ledger
    from ratchet.judge import JudgeOptions, evaluate
    from ratchet.run.record import record_and_keep
    from ratchet.task import load_task

    require_device(device)
    done = []
    for op in chosen:
        task = load_task(str(task_path(op)))
        candidate = load_candidate(write_compile_candidate(op, folder))
        verdict = evaluate(task, candidate, {}, JudgeOptions(device=device)).to_json(with_times=True)
        with open_ledger(ledger_path) as ledger:
            run_id = ledger.create_run(task=task.name, task_path=task.source_path, device=device,
                                       device_name=api.resolve_device_name(device, None), proposer=BASELINE,
                                       options={"benchmark": BENCHMARK, "op": op, "baseline": "torch.compile"})
            record_and_keep(ledger, run_id, candidate, {}, verdict, BASELINE)
            ledger.set_status(run_id, "done", "baseline judged")
        done.append({"op": op, "run": run_id, "verdict": verdict["verdict"], "speedup": verdict["speedup"]})
    return done


# -- the table -----------------------------------------------------------------------------------------


@dataclass
class OpRow:
    op: str
    attempts: int = 0
    passed: int = 0
    best_speedup: float | None = None
    compile_speedup: float | None = None
    judge_s: float = 0.0
    failures: Counter = field(default_factory=Counter)
    runs: list[str] = field(default_factory=list)

    @property
    def over_compile(self) -> float | None:
        if self.best_speedup is None or not self.compile_speedup:
            return None
        return self.best_speedup / self.compile_speedup


def collect(ledger, device: str | None = None, device_name: str | None = None) -> list[OpRow]:
    """Per op, from every run of its task in the ledger (on ``device`` / ``device_name`` if given)."""
    names = set(ops())
    rows = {op: OpRow(op) for op in ops()}
    for run in ledger.list_runs():
        if run["task"] not in names or (device and run["device"] != device):
            continue
        if device_name and run["device_name"] != device_name:
            continue
        row = rows[run["task"]]
        attempts = ledger.attempts(run["id"])
        if run["proposer"] == BASELINE:
            passing = [a["speedup"] for a in attempts if a["verdict"] == "pass" and a["speedup"] is not None]
            if passing:  # the newest baseline measurement wins
                row.compile_speedup = passing[-1]
            continue
        row.runs.append(run["id"])
        for a in attempts:
            row.attempts += 1
            row.judge_s += a["judge_wall_s"] or 0.0
            if a["verdict"] == "pass":
                row.passed += 1
                if a["speedup"] is not None and (row.best_speedup is None or a["speedup"] > row.best_speedup):
                    row.best_speedup = a["speedup"]
            else:
                row.failures.update(r["code"] for r in a["reasons"] or [{"code": a["verdict"]}])
    return [rows[op] for op in ops()]


HEADER = ["op", "attempts", "passed", "best vs reference", "torch.compile vs reference", "best vs torch.compile",
          "judge minutes", "failures by reason"]


def table_cells(row: OpRow) -> list[str]:
    def x(value):
        return "-" if value is None else f"{value:.2f}x"

    compile_text = x(row.compile_speedup) if row.compile_speedup is not None else "not measured"
    over = x(row.over_compile) if row.compile_speedup is not None else "not measured"
    fraction = f"{row.passed}/{row.attempts} ({row.passed / row.attempts:.0%})" if row.attempts else "0/0"
    failures = ", ".join(f"{code} {n}" for code, n in sorted(row.failures.items(), key=lambda kv: (-kv[1], kv[0])))
    return [row.op, str(row.attempts), fraction, x(row.best_speedup), compile_text, over,
            f"{row.judge_s / 60:.1f}", failures or "-"]


def render(rows: list[OpRow], as_csv: bool = False) -> str:
    if as_csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(table_cells(r) for r in rows)
        return buffer.getvalue()
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# -- command line --------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    from ratchet.cli.run import add_llm_flags

    p = argparse.ArgumentParser(prog="agent_bench.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("setup", help="one run and program.md per op (or, with --proposer llm, drive the runs)")
    st.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    st.add_argument("--device-name", metavar="NAME", help="the GPU that will judge the runs, e.g. H200 (needed for "
                    "cuda on a machine without a GPU)")
    st.add_argument("--ledger", metavar="PATH")
    st.add_argument("--out", default="agent_bench_runs", metavar="DIR", help="one folder per op (default: "
                    "./agent_bench_runs)")
    st.add_argument("--ops", nargs="+", metavar="OP", help=f"a subset of: {', '.join(ops())}")
    st.add_argument("--target", metavar="SPEEDUP", help="goal of each run, e.g. 2x")
    st.add_argument("--proposer", choices=["agent", "llm"], default="agent")
    st.add_argument("--budget", type=int, default=30, metavar="N", help="attempts per op with --proposer llm "
                    "(default 30)")
    st.add_argument("--compile-baseline", action="store_true", help="also judge torch.compile of each reference "
                    "(see 'baseline'); needs the device")
    add_llm_flags(st)
    bl = sub.add_parser("baseline", help="judge torch.compile of each op's reference (proposer 'baseline')")
    bl.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    bl.add_argument("--ledger", metavar="PATH")
    bl.add_argument("--ops", nargs="+", metavar="OP")
    bl.add_argument("--out", default="agent_bench_runs", metavar="DIR")
    tb = sub.add_parser("table", help="the benchmark's table from the ledger")
    tb.add_argument("--ledger", metavar="PATH")
    tb.add_argument("--csv", action="store_true")
    tb.add_argument("--device", choices=["cpu", "cuda"])
    tb.add_argument("--device-name", metavar="NAME")
    return p


def _chosen(names: list[str] | None) -> list[str]:
    known = ops()
    bad = [n for n in names or [] if n not in known]
    if bad:
        raise BenchError(f"unknown op {bad[0]!r}: the ops are {', '.join(known)}")
    return names or known


def main(argv: list[str] | None = None) -> int:
    from ratchet.cli.common import UsageError, parse_speedup
    from ratchet.run.ledger import LedgerError
    from ratchet.task import TaskError

    args = parser().parse_args(argv)
    try:
        if args.command == "setup":
            chosen, target = _chosen(args.ops), parse_speedup(args.target)
            if args.proposer == "llm":
                from ratchet.cli.common import resolve_device
                from ratchet.cli.run import llm_settings

                args.resume = None
                settings = llm_settings(args)
                device = resolve_device(args.device)
                if args.compile_baseline:
                    judge_baselines(args.ledger, device, chosen, Path(args.out) / "baselines")
                codes = drive_llm(args.ledger, device, chosen, settings, args.budget, target)
                return max(codes, default=0)
            if args.compile_baseline:
                require_device(args.device)  # before any run is created
            for made in setup(args.ledger, Path(args.out), args.device, args.device_name, chosen, target):
                print(f"{made['op']}: run {made['run']}, {made['program']}")
            if args.compile_baseline:
                for b in judge_baselines(args.ledger, args.device, chosen, Path(args.out) / "baselines"):
                    print(f"{b['op']}: torch.compile baseline {b['verdict']}"
                          + (f" {b['speedup']:.2f}x" if b["speedup"] else "") + f" (run {b['run']})")
        elif args.command == "baseline":
            for b in judge_baselines(args.ledger, args.device, _chosen(args.ops), Path(args.out) / "baselines"):
                print(f"{b['op']}: torch.compile baseline {b['verdict']}"
                      + (f" {b['speedup']:.2f}x" if b["speedup"] else "") + f" (run {b['run']})")
        else:
            from ratchet.agents.api import resolve_device_name
            from ratchet.cli.common import open_ledger
            from ratchet.run.ledger import default_ledger_path

            if not default_ledger_path(args.ledger).exists():
                raise BenchError(f"no ledger at {default_ledger_path(args.ledger)}")
            name = resolve_device_name("cuda", args.device_name) if args.device_name else None
            with open_ledger(args.ledger, create=False) as ledger:
                sys.stdout.write(render(collect(ledger, args.device, name), args.csv))
    except (BenchError, UsageError, LedgerError, TaskError) as exc:
        print(f"agent_bench.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
