"""When a run's verdicts came: each attempt's verdict, judge seconds and the seconds from the run's start
to its record, read from a ledger. The README's main job's first verdict is the goal this measures
(within 30 s on the H200).

    python -m ratchet run top_p_sampling --budget 12 --device cuda --ledger out/main.sqlite
    python -m benchmarks.probes.first_verdict --ledger out/main.sqlite [--run RUN] [--out out/first_verdict.md]

Exit status 2 for a ledger that cannot be read or holds no such run.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from ratchet.run.ledger import Ledger, LedgerError


def rows(ledger: Ledger, run_id: str) -> list[dict]:
    """The run's attempts in the order they were recorded, with seconds from the run's creation."""
    start = datetime.fromisoformat(ledger.get_run(run_id)["created_at"])
    out = []
    for a in sorted(ledger.attempts(run_id), key=lambda a: a["created_at"]):
        out.append({"seq": a["seq"], "file": Path(a["candidate_path"]).name, "verdict": a["verdict"],
                    "judge_s": a["judge_wall_s"],
                    "recorded_s": (datetime.fromisoformat(a["created_at"]) - start).total_seconds()})
    return out


def table(found: list[dict]) -> str:
    lines = ["| attempt | file | verdict | judge s | recorded at s |", "| --- | --- | --- | --- | --- |"]
    for r in found:
        judge = "-" if r["judge_s"] is None else f"{r['judge_s']:.1f}"
        lines.append(f"| {r['seq']} | {r['file']} | {r['verdict']} | {judge} | {r['recorded_s']:.1f} |")
    first = f"{found[0]['recorded_s']:.1f} s" if found else "none yet"
    return "\n".join(lines + [f"first verdict: {first} after the run started"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--run", default=None, help="default: the ledger's newest run")
    parser.add_argument("--out", default=None, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    if not Path(args.ledger).is_file():
        print(f"first_verdict: no ledger at {args.ledger}", file=sys.stderr)
        return 2
    try:
        with Ledger(args.ledger) as ledger:
            runs = ledger.list_runs()
            run_id = args.run or (runs[-1]["id"] if runs else None)
            if run_id is None:
                print(f"first_verdict: {args.ledger} holds no run", file=sys.stderr)
                return 2
            text = table(rows(ledger, run_id))
    except LedgerError as exc:
        print(f"first_verdict: {exc}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
