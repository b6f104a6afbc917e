"""The runs behind the suite's "best" column: one `ratchet run` per task, each on the suite's subset of
the task (the first N public shapes, the first dtype), with a wall-time budget per task, all in one
ledger. Then the suite judges each run's best beside the peers:

    python benchmarks/suite_runs.py --tasks rmsnorm silu_mul --shapes 4 --time-per-task 90 \
        --ledger out/ledger.sqlite --out out/
    python benchmarks/suite.py --tasks rmsnorm silu_mul --shapes 4 --ledger out/ledger.sqlite \
        $(cat out/suite_best_args.txt)

A device session is short, so the ledger is meant to travel: bring it back under $OUT, carry it into
the next session, and the suite (or `--resume`) picks up the runs made before. A task whose run fails
to start is a line in the table, and the next task still runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console

def write_subset_task(name: str, device: str, shapes: int | None, first_dtype: bool, folder: Path) -> Path:
    """A task file for `ratchet run`: the built-in task with fewer shapes and dtypes, same name and seeds
    (so the suite's --best NAME=RUN matches it, and --resume finds the file again)."""
    what = ", ".join(([f"first {shapes} public shapes"] if shapes else []) + (["first dtype"] if first_dtype else []))
    changes = []
    if shapes:
        field = "cpu" if device == "cpu" else "gpu"
        changes.append(f"{field}=dataclasses.replace(_SET, public=list(_SET.public[:{shapes}]))")
    if first_dtype:
        changes.append("dtypes=_FULL.dtypes[:1]")
    path = folder / f"{name}_suite_subset.py"
    path.write_text(
        f'"""{name}, as benchmarks/suite_runs.py runs it: {what or "unchanged"}. Generated."""\n'
        "import dataclasses\n\nfrom ratchet.task import load_task\n\n"
        f"_FULL = load_task({name!r})\n_SET = _FULL.shape_set({device!r})\n"
        f"TASK = dataclasses.replace(_FULL, {', '.join(changes)})\n")
    return path


def run_one(ledger_path: Path, task_file: Path, device: str, seconds: float, budget: int | None,
            console: Console) -> dict:
    from ratchet.run.ledger import Ledger
    from ratchet.run.run_command import RunRequest, start_or_resume

    t0 = time.perf_counter()
    with Ledger(ledger_path) as ledger:
        before = {r["id"] for r in ledger.list_runs()}
        start_or_resume(ledger, RunRequest(task=str(task_file), device=device, seconds=seconds, budget=budget),
                        console)
        run = next(r for r in ledger.list_runs() if r["id"] not in before)
        best = ledger.best(run["id"])
    return {"run": run["id"], "attempts": run["attempts"], "wall_s": round(time.perf_counter() - t0, 1),
            "best_speedup": best and best["speedup"],
            "best": best and f"{Path(best['candidate_path']).name} {json.dumps(best['config'])}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", required=True, metavar="TASK", help="built-in task names")
    p.add_argument("--shapes", type=int, default=4, metavar="N", help="first N public shapes (0: all; default 4)")
    p.add_argument("--all-dtypes", action="store_true", help="every dtype of the task (default: the first)")
    p.add_argument("--time-per-task", type=float, default=90.0, metavar="S",
                   help="wall-time budget of each run; the attempt in flight when it ends still finishes")
    p.add_argument("--budget", type=int, metavar="N", help="also stop each run after N attempts")
    p.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    p.add_argument("--ledger", required=True, help="the ledger the runs go into (created if missing)")
    p.add_argument("--out", default="out", help="runs.md, runs.json and suite_best_args.txt go here")
    args = p.parse_args(argv)

    import torch

    from ratchet.task import load_task

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    Path(args.ledger).parent.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    rows = []
    for name in args.tasks:
        row = {"task": name}
        try:
            load_task(name)  # a typo is one line, not a traceback
            task_file = write_subset_task(name, device, args.shapes, not args.all_dtypes, out / "tasks")
            row.update(run_one(Path(args.ledger), task_file, device, args.time_per_task, args.budget, console))
        except Exception as exc:  # one task's failure must not cost the others their runs
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            console.print(f"[red]{name}: {row['error']}[/red]")
        rows.append(row)
        write_outputs(rows, args, device, out)  # after every task: a time limit may cut the script
    return 0 if any("run" in r for r in rows) else 1


def write_outputs(rows: list[dict], args, device: str, out: Path):
    (out / "runs.json").write_text(json.dumps({"device": device, "date": time.strftime("%Y-%m-%d %H:%M"),
                                               "argv": sys.argv[1:], "rows": rows}, indent=1))
    lines = [f"Runs for the suite's best column, {device}, {time.strftime('%Y-%m-%d')}: "
             f"`python benchmarks/suite_runs.py {' '.join(sys.argv[1:])}`", "",
             "| task | run | attempts | wall s | best speedup | best |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | - | - | - | - | {r['error']} |")
        else:
            speed = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "none passed"
            lines.append(f"| {r['task']} | {r['run']} | {r['attempts']} | {r['wall_s']} | {speed} | {r['best'] or '-'} |")
    (out / "runs.md").write_text("\n".join(lines) + "\n")
    (out / "suite_best_args.txt").write_text(
        " ".join(f"--best {r['task']}={r['run']}" for r in rows if r.get("best_speedup")) + "\n")


if __name__ == "__main__":
    sys.exit(main())
