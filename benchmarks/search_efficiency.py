"""Search efficiency of the tuner: trials and GPU seconds to come within 2% of the exhaustive best.

Every valid config of a seed's SPACE is measured once (exhaustive, what ``triton.autotune`` does) and
the table is saved; then TPE, random and exhaustive-in-order search are replayed over it from several
search seeds (Kernel Tuner's simulation mode: a config's outcome does not depend on when it is tried),
counting the trials and seconds each needs to first reach 98% of the best speedup.

Measuring: by default in landscape mode (benchmarks/landscape.py: one process, the judge's timed-call
code, first dtype, first ``--shapes`` public shapes); ``--full-judge`` runs ``ratchet.judge.evaluate``
per config instead (what the 2026-11-30 H200 table is). A trial costs ``--judge-seconds S`` in the
replay (the mean wall time of one full evaluation, measured separately), else the seconds the table
recorded for that config.

    python benchmarks/search_efficiency.py --all-triton-seeds --shapes 4 --out out/   # on a GPU
    python benchmarks/search_efficiency.py --seed-files src/ratchet/tasks/top_p_sampling/seeds/cpu_*.py \
        --device cpu --out out/
    python benchmarks/search_efficiency.py --table out/landscapes/*.json --judge-seconds 21   # replay only
    python benchmarks/search_efficiency.py --table ... --synthetic 8 --variants   # tuner variants (or name some)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # landscape.py, when run as a script

from ratchet.candidate import Candidate, load_candidate  # noqa: E402
from ratchet.run.ledger import config_key  # noqa: E402
from ratchet.search.base import Outcome  # noqa: E402
from ratchet.search.tune import TuneProposer, TuneSettings  # noqa: E402
from ratchet.task import TaskError, load_task  # noqa: E402

WITHIN = 0.98
ROOT = Path(__file__).parent.parent
MIN_CONFIGS = 8  # smaller spaces say little about a searcher
# Search variants compared by --variants: (sampler, TuneSettings); docs/NOTES.md has the numbers that
# chose the default.
VARIANTS = {
    # before 2026-11-30's bounded repeats
    "tpe-old": ("tpe", TuneSettings(asks=None, fallback="first", zero_last=False, neighbours_below=0)),
    "tpe-2026-11": ("tpe", TuneSettings(zero_last=False, neighbours_below=0)),  # the default before session 16
    "neighbours-always": ("tpe", TuneSettings(neighbours_below=10**9)),
    "ordinal": ("tpe", TuneSettings(ordinal=True)),
    "ordinal-multivariate": ("tpe", TuneSettings(ordinal=True, multivariate=True)),
    "ordinal-startup-3": ("tpe", TuneSettings(ordinal=True, startup_max=3)),
    "categorical-multivariate": ("tpe", TuneSettings(multivariate=True)),
}


def triton_seeds() -> list[Path]:
    """Built-in Triton seeds whose SPACE has at least MIN_CONFIGS valid configs."""
    paths = sorted((ROOT / "src" / "ratchet" / "tasks").glob("*/seeds/triton*.py"))
    return [p for p in paths if len(load_candidate(p).valid_configs()) >= MIN_CONFIGS]


def measure(seed_file: Path, device: str, shapes: int, full_judge: bool, partial: Path,
            task_spec: str | None = None) -> dict:
    from landscape import LandscapeOptions, measure_landscape, restricted_task

    from ratchet.task import load_task

    task_name = task_spec or seed_file.parent.parent.name
    task, cand = restricted_task(load_task(task_name), device, shapes), load_candidate(seed_file)
    table = {"task": task_name, "seed_file": str(seed_file), "device": device, "date": time.strftime("%Y-%m-%d"),
             "mode": "full-judge" if full_judge else "landscape", "dtype": str(task.dtypes[0]),
             "shapes": [dict(s) for s in task.shape_set(device).public], "rows": []}

    def keep(row):
        table["rows"].append(row)
        print(f"  [{len(table['rows'])}/{len(cand.valid_configs())}] {row['config']} {row['verdict']} "
              f"{row['speedup']} {row.get('landscape_s', row.get('judge_s'))}s"
              + (f" ({row['reason']})" if row.get("reason") else ""), flush=True)
        partial.write_text(json.dumps(table, indent=1))  # a run cut short still leaves what it measured

    if full_judge:
        from ratchet.judge import JudgeOptions, evaluate

        for config in cand.valid_configs():
            verdict = evaluate(task, cand, config, JudgeOptions(device=device))
            keep({"config": config, "verdict": verdict.verdict, "speedup": verdict.speedup,
                  "judge_s": verdict.judge_wall_s})
    else:
        measure_landscape(task, cand, LandscapeOptions(device=device, shapes=shapes), on_row=keep)
    return table


def table_candidate(table: dict) -> Candidate:
    if table.get("space"):  # synthetic tables carry their SPACE
        return Candidate(path="synthetic", source="", space={k: tuple(v) for k, v in table["space"].items()},
                         constraints=tuple(table.get("constraints", ())))
    candidate = load_candidate(ROOT / table["seed_file"])
    # The seed's SPACE may have grown since the table was measured (softmax's PROGRAMS gained 512 and
    # rmsnorm a HINTS key in session 9): replay over the keys and values the table holds, in the seed's
    # order, so every proposal has a row.
    measured = {key: {json.dumps(r["config"][key]) for r in table["rows"] if key in r["config"]}
                for key in candidate.space}
    space = {key: tuple(v for v in values if json.dumps(v) in measured[key])
             for key, values in candidate.space.items() if measured[key]}
    candidate = dataclasses.replace(candidate, space=space)
    # A run cut short (session 16's split-row table lacks 1 of 42) leaves combinations unmeasured: the
    # replay excludes each by a constraint, as if the seed had never allowed it.
    have = {config_key(r["config"]) for r in table["rows"]}
    missing = tuple("not (" + " and ".join(f"{k} == {v!r}" for k, v in c.items()) + ")"
                    for c in candidate.valid_configs() if config_key(c) not in have)
    return dataclasses.replace(candidate, constraints=candidate.constraints + missing)


def trial_seconds(row: dict, judge_s: float | None) -> float:
    return judge_s if judge_s is not None else row.get("judge_s", row.get("landscape_s", 0.0))


def replay(table: dict, sampler: str, search_seed: int, settings: TuneSettings | None = None,
           judge_s: float | None = None) -> tuple[int, float]:
    """Trials and seconds until a config within 2% of the best speedup is measured."""
    by_key = {config_key(r["config"]): r for r in table["rows"]}
    best = max(r["speedup"] for r in table["rows"] if r["speedup"])
    proposer = TuneProposer([table_candidate(table)], sampler=sampler, seed=search_seed, settings=settings)
    seconds = 0.0
    for trial in range(1, len(by_key) + 1):
        proposal = proposer.propose()
        row = by_key[config_key(proposal.config)]
        seconds += trial_seconds(row, judge_s)
        if row["speedup"] and row["speedup"] >= WITHIN * best:
            return trial, seconds
        proposer.tell(proposal, Outcome(row["verdict"], row["speedup"]))
    return len(by_key), seconds


def shape_weight(task_name: str):
    """The task's shape weights, for tables saved before each shape kept its weight (1 if unknown)."""
    try:
        return load_task(task_name).shape_weight
    except TaskError:
        return lambda shape: 1.0


def summarize_table(table: dict, searches: dict, seeds: int, judge_s: float | None,
                    own_reference: bool = False) -> list[dict]:
    if not own_reference:
        from landscape import pooled_reference

        table = pooled_reference(table, shape_weight(table["task"]))
    n = len(table["rows"])
    name = Path(table["seed_file"]).name if table.get("seed_file") else table["task"]
    exhaustive = sum(trial_seconds(r, judge_s) for r in table["rows"])
    out = []
    for label, (sampler, settings) in searches.items():
        results = [replay(table, sampler, s, settings, judge_s) for s in range(seeds)]
        trials = statistics.median(r[0] for r in results)
        out.append({"task": table["task"], "seed": name, "device": table["device"], "search": label, "valid": n,
                    "exhaustive_s": round(exhaustive, 1), "median_trials": trials,
                    "share": round(trials / n, 3), "median_s": round(statistics.median(r[1] for r in results), 1)})
    return out


def write(rows: list[dict], out: Path, note: str):
    lines = [note, "", "| task / seed | device | search | valid configs | exhaustive s | median trials to 2% "
             "| share of exhaustive | median s |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} / {r['seed']} | {r['device']} | {r['search']} | {r['valid']} | {r['exhaustive_s']:g} "
              f"| {r['median_trials']:g} | {100 * r['share']:.0f}% | {r['median_s']:g} |" for r in rows]
    (out / "search_efficiency.md").write_text("\n".join(lines) + "\n")
    (out / "search_efficiency.json").write_text(json.dumps(rows, indent=1))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed-file", "--seed-files", dest="seed_files", nargs="+", default=[],
                        help="seeds whose SPACE is measured (the task is the seed's folder)")
    parser.add_argument("--all-triton-seeds", action="store_true",
                        help=f"every built-in Triton seed with at least {MIN_CONFIGS} valid configs")
    parser.add_argument("--task", default=None, help="task name or file (default: the seed's folder)")
    parser.add_argument("--device", default=None, help="default: cuda if present")
    parser.add_argument("--shapes", type=int, default=4, help="first N public shapes (first dtype)")
    parser.add_argument("--full-judge", action="store_true", help="ratchet.judge.evaluate per config")
    parser.add_argument("--table", nargs="+", default=[], help="replay saved tables instead of measuring")
    parser.add_argument("--synthetic", type=int, default=0, help="also replay N synthetic (model) landscapes")
    parser.add_argument("--variants", nargs="*", default=None, metavar="NAME",
                        help=f"replay these variants too (all without names): {', '.join(VARIANTS)}")
    parser.add_argument("--judge-seconds", type=float, default=None, help="GPU seconds one trial costs")
    parser.add_argument("--own-reference", action="store_true",
                        help="score each config against the reference timed beside it (default: against each "
                             "shape's median reference over the whole table, which keeps the reference's noise "
                             "out of the ranking)")
    parser.add_argument("--search-seeds", type=int, default=21)
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    out = Path(args.out)
    (out / "landscapes").mkdir(parents=True, exist_ok=True)
    searches = {"tpe": ("tpe", None), "random": ("random", None), "grid": ("grid", None)}
    if args.variants is not None:
        unknown = [v for v in args.variants if v not in VARIANTS]
        if unknown:
            parser.error(f"unknown variant '{unknown[0]}' (choose from {', '.join(VARIANTS)})")
        searches.update({name: VARIANTS[name] for name in args.variants or VARIANTS})
    cost = f"{args.judge_seconds:g} s per trial" if args.judge_seconds else "the seconds each table recorded per config"
    scored = ("each against the reference timed beside it" if args.own_reference else
              "landscape rows against each shape's median reference time over the table")
    note = (f"Trials to within 2% of the exhaustive best, median over {args.search_seeds} search seeds; "
            f"a trial costs {cost}; configs scored {scored}.")
    tables = [json.loads(Path(t).read_text()) for t in args.table]
    if args.synthetic:
        from landscape import synthetic_table

        tables += [synthetic_table(s) for s in range(args.synthetic)]
    seeds = [Path(p) for p in args.seed_files] + (triton_seeds() if args.all_triton_seeds else [])
    rows = []
    for table in tables:
        rows += summarize_table(table, searches, args.search_seeds, args.judge_seconds, args.own_reference)
        print(write(rows, out, note).splitlines()[-1], flush=True)
    if seeds:
        import torch

        from landscape import CPU_POLICY, GPU_POLICY, estimate_s

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cpu":  # Triton seeds run under Triton's interpreter here, as in the judge's CPU workers
            os.environ.setdefault("TRITON_INTERPRET", "1")
        counts = [len(load_candidate(p).valid_configs()) for p in seeds]
        bound = sum(estimate_s(c, args.shapes, GPU_POLICY if device == "cuda" else CPU_POLICY, device == "cuda")
                    for c in counts)
        print(f"{len(seeds)} seeds, {sum(counts)} configs x {args.shapes} shapes = {sum(counts) * args.shapes} "
              f"timed shapes on {device}; timing at most {bound:.0f} s (each shape and mode stops at twice "
              f"the policy's cap), plus compiles and checks", flush=True)
        for path in seeds:
            print(f"{path}", flush=True)
            landscape = out / "landscapes" / f"{path.parent.parent.name}__{path.stem}.json"
            table = measure(path, device, args.shapes, args.full_judge, landscape, args.task)
            if any(r["speedup"] for r in table["rows"]):
                rows += summarize_table(table, searches, args.search_seeds, args.judge_seconds, args.own_reference)
            print(write(rows, out, note), flush=True)  # partial results after every seed
    if not rows:
        parser.error("nothing to do: give --table, --synthetic, --seed-files or --all-triton-seeds")
    print(write(rows, out, note))


if __name__ == "__main__":
    main()
