"""Judge every seed of the given tasks twice on one device and write a table.

Measures what the judge must show on real hardware: per-shape speedup and fraction of the
roofline for each seed, run-to-run agreement of the median (two full evaluations, same session), and
the judge's own wall time per evaluation (what a user waits).

    python -m benchmarks.probes.eval_seeds --tasks rmsnorm top_p_sampling --out out/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file, its package imports cannot work
    sys.exit("run it from the repository root as: python -m benchmarks.probes.eval_seeds ...")

import torch

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task
from benchmarks.common import command_line, describe_subset, parse_where, record_results, subset_task, verdict_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["rmsnorm", "top_p_sampling"])
    parser.add_argument("--seeds", nargs="*", help="only seeds whose file name contains one of these")
    parser.add_argument("--seed-files", nargs="+", type=Path, metavar="FILE",
                        help="judge these candidate files (variants of a seed, side by side); with --seeds, "
                             "the matching seeds as well")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shapes", type=int, help="only the first N public shapes of each task")
    parser.add_argument("--first-dtype", action="store_true", help="only each task's first dtype")
    parser.add_argument("--where", nargs="+", metavar="SIZE=N",
                        help="only public shapes with these sizes (e.g. Hkv=1 for DeepSeek's MLA heads)")
    parser.add_argument("--config", nargs="+", metavar="JSON", type=_config,
                        help="judge each seed at these configs (JSON objects) instead of its defaults")
    parser.add_argument("--out", default="out")
    args = parser.parse_args(argv)
    try:
        where = parse_where(args.where)
    except ValueError as exc:
        parser.error(str(exc))
    missing = [str(p) for p in args.seed_files or [] if not p.is_file()]
    if missing:
        parser.error(f"--seed-files: no such file: {', '.join(missing)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, lines = [], []
    for name in args.tasks:
        try:
            task = subset_task(load_task(name), args.device, args.shapes, args.first_dtype, where)
        except ValueError as exc:
            parser.exit(2, f"eval_seeds.py: {exc}\n")
        chosen = [] if args.seed_files and args.seeds is None else \
            [s for s in task.seeds() if not args.seeds or any(part in s.name for part in args.seeds)]
        for seed in chosen + list(args.seed_files or []):
            for config in args.config or [None]:
                label = seed.name + (f" {json.dumps(config, separators=(',', ':'))}" if config else "")
                runs = []
                for _ in range(args.repeats):
                    verdict = evaluate(task, load_candidate(seed), config, JudgeOptions(device=args.device))
                    runs.append(verdict.to_json())
                    print(f"{name}/{label}: {verdict.verdict} speedup={verdict.speedup} "
                          f"wall={verdict.judge_wall_s:.1f}s {[r.code for r in verdict.reasons]}", flush=True)
                records.append({"task": name, "seed": seed.name, "config": config, "runs": runs})
                lines += table_rows(name, label, runs)
                table = write_tables(out, args.device, records, lines,  # after each one: a time limit keeps them
                                     describe_subset(args.shapes, args.first_dtype, where))
    print(table)
    for rec in records:
        walls = [r["judge_wall_s"] for r in rec["runs"]]
        print(f"judge wall time {rec['task']}/{rec['seed']}: {', '.join(f'{w:.1f}' for w in walls)} s "
              f"verdicts {[r['verdict'] for r in rec['runs']]} speedup {[r['speedup'] for r in rec['runs']]}")
    record_results("eval_seeds", [row for rec in records for i, run in enumerate(rec["runs"]) for row in verdict_rows(
        run, task=rec["task"], candidate=rec["seed"], config=rec["config"], run=i + 1)], device=args.device,
        command=command_line("benchmarks.probes.eval_seeds", argv))
    return 0


def _config(text: str) -> dict:
    """A --config value: a JSON object (argparse turns the ValueError into one usage line, exit 2)."""
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"not a JSON object: {text}")
    return config


def write_tables(out: Path, device_kind: str, records: list, lines: list, subset: str = "") -> str:
    stamp = time.strftime("%Y-%m-%d")
    device = torch.cuda.get_device_name(0) if device_kind == "cuda" else "cpu"
    (out / "eval_seeds.json").write_text(json.dumps({"date": stamp, "device": device, "records": records}, indent=1))
    header = ("| task | seed | shape | dtype | mode | median µs (run 1) | run 2 | diff % | ref µs | speedup | TB/s | "
              "roofline % |\n|" + "---|" * 12)
    table = "\n".join([f"{device}, {stamp}" + (f" ({subset})" if subset else ""), header] + lines)
    (out / "eval_seeds.md").write_text(table + "\n")
    return table


def table_rows(task: str, seed: str, runs: list[dict]) -> list[str]:
    rows = []
    first = runs[0]
    for i, row in enumerate(first["shapes"]):
        if row["median_us"] is None:
            continue
        second = runs[1]["shapes"][i] if len(runs) > 1 and len(runs[1]["shapes"]) > i else {}
        other = second.get("median_us")
        diff = f"{100 * (other - row['median_us']) / row['median_us']:+.1f}" if other else "-"
        shape = " ".join(f"{k}={v}" for k, v in row["shape"].items())
        rows.append(f"| {task} | {seed} | {shape} | {row['dtype']} | {row['mode']} | {row['median_us']:.2f} | "
                    f"{f'{other:.2f}' if other else '-'} | {diff} | {row['ref_median_us']:.2f} | {row['speedup']:.2f} | "
                    f"{row['achieved_tbps'] or 0:.2f} | {100 * (row['roofline_fraction'] or 0):.0f} |")
    return rows


if __name__ == "__main__":
    sys.exit(main())
