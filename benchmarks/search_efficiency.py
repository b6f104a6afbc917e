"""Search efficiency of the tuner: trials and judge seconds to come within 2% of the exhaustive best.

Every valid config of a seed's SPACE is judged once (what `triton.autotune` does: exhaustive), and the
table is saved. Then TPE, random and exhaustive-in-order search are replayed over that table from
several search seeds (Kernel Tuner's simulation mode: a config's outcome does not depend on when it is
tried), counting the trials and the judge seconds each needs to first reach 98% of the best speedup.

    python benchmarks/search_efficiency.py --task rmsnorm \
        --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --out out/
    python benchmarks/search_efficiency.py --table out/search_table.json   # replay only
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from ratchet.candidate import load_candidate
from ratchet.ledger import config_key
from ratchet.search.base import Outcome
from ratchet.search.tune import TuneProposer

WITHIN = 0.98


def measure_table(task_name: str, seed_file: str, device: str, partial: Path) -> dict:
    from ratchet.judge import JudgeOptions, evaluate
    from ratchet.task import load_task

    task, cand = load_task(task_name), load_candidate(seed_file)
    rows = []
    for i, config in enumerate(cand.valid_configs()):
        verdict = evaluate(task, cand, config, JudgeOptions(device=device))
        rows.append({"config": config, "verdict": verdict.verdict, "speedup": verdict.speedup,
                     "judge_s": verdict.judge_wall_s})
        print(f"[{i + 1}/{len(cand.valid_configs())}] {config} {verdict.verdict} {verdict.speedup} "
              f"{verdict.judge_wall_s:.1f}s", flush=True)
        table = {"task": task_name, "seed_file": seed_file, "device": device, "date": time.strftime("%Y-%m-%d"),
                 "rows": rows}
        # Written after every row so that a run cut short by a time limit still leaves what it measured.
        partial.write_text(json.dumps(table, indent=1))
    return table


def replay(table: dict, sampler: str, search_seed: int) -> tuple[int, float]:
    """Trials and judge seconds until a config within 2% of the best speedup is judged."""
    cand = load_candidate(table["seed_file"])
    by_key = {config_key(r["config"]): r for r in table["rows"]}
    best = max(r["speedup"] for r in table["rows"] if r["speedup"])
    proposer = TuneProposer([cand], sampler=sampler, seed=search_seed)
    seconds = 0.0
    for trial in range(1, len(by_key) + 1):
        proposal = proposer.propose()
        row = by_key[config_key(proposal.config)]
        seconds += row["judge_s"]
        if row["speedup"] and row["speedup"] >= WITHIN * best:
            return trial, seconds
        proposer.tell(proposal, Outcome(row["verdict"], row["speedup"]))
    return len(by_key), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="rmsnorm")
    parser.add_argument("--seed-file", help="the seed whose SPACE is searched")
    parser.add_argument("--device", default=None, help="default: cuda if present")
    parser.add_argument("--table", help="replay a saved table instead of measuring")
    parser.add_argument("--search-seeds", type=int, default=11)
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.table:
        table = json.loads(Path(args.table).read_text())
    else:
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        table = measure_table(args.task, args.seed_file, device, out / "search_table.json")
    n = len(table["rows"])
    lines = [f"{table['task']} / {Path(table['seed_file']).name} on {table['device']}, measured {table['date']}: "
             f"{n} valid configs, exhaustive costs {sum(r['judge_s'] for r in table['rows']):.0f} judge s",
             "| search | median trials to within 2% | share of exhaustive | median judge s |", "|---|---|---|---|"]
    for sampler in ("tpe", "random", "grid"):
        results = [replay(table, sampler, s) for s in range(args.search_seeds)]
        trials = statistics.median(r[0] for r in results)
        secs = statistics.median(r[1] for r in results)
        lines.append(f"| {sampler} | {trials:g} | {100 * trials / n:.0f}% | {secs:.0f} |")
    text = "\n".join(lines)
    (out / "search_efficiency.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
