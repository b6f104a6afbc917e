"""The search-efficiency benchmark's replay, on a recorded table: each search reaches the best."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_replay_counts_trials_to_the_best(tmp_path):
    seed = str(ROOT / "tests" / "data" / "candidates" / "axpby_tunable.py")
    speed = {0: 1.0, 64: 1.1, 256: 2.0, 1024: 1.2}
    rows = [{"config": {"CHUNK": c, "ORDER": o}, "verdict": "pass", "speedup": speed[c] + (0.01 if o == "yx" else 0),
             "judge_s": 2.0} for c in speed for o in ("xy", "yx")]
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"task": "axpby", "seed_file": seed, "device": "recorded", "date": "2026-11-30",
                                 "rows": rows}))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.probes.search_efficiency", "--table", str(table),
                           "--out", str(tmp_path), "--search-seeds", "5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    # Columns: task / seed, device, search, valid configs, exhaustive s, median trials, share, median s.
    lines = {line.split("|")[3].strip(): line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ")
             and "search" not in line}
    # Grid walks SPACE in order: CHUNK=256 comes 5th (0/xy, 0/yx, 64/xy, 64/yx, 256/xy).
    assert lines["grid"][6].strip() == "5"
    assert lines["grid"][8].strip() == "10"  # five trials of 2 judge seconds
    for sampler in ("tpe", "random"):
        assert 1 <= float(lines[sampler][6]) <= 8


def test_pooled_reference_ranks_configs_by_their_own_times():
    from benchmarks.probes.landscape import pooled_reference

    def row(cand_us, ref_us, verdict="pass"):
        shapes = [{"shape": {"N": 8}, "mode": "eager", "cand_us": cand_us, "ref_us": ref_us, "weight": 1.0}]
        return {"config": {"C": cand_us}, "verdict": verdict, "speedup": ref_us / cand_us, "shapes": shapes}

    # The slower config (10 us) drew a slow reference beside it (100 us) and looked 10x; the faster one
    # (9 us) drew a quick one (50 us) and looked 5.6x. Against the shapes' median reference (75 us) the
    # faster config ranks first. A failed row is left as it was.
    table = {"task": "axpby", "rows": [row(10.0, 100.0), row(9.0, 50.0), row(8.0, 75.0, "fail")]}
    pooled = pooled_reference(table)
    speedups = [r["speedup"] for r in pooled["rows"]]
    assert abs(speedups[0] - 7.5) < 1e-12 and abs(speedups[1] - 75.0 / 9.0) < 1e-12
    assert [r["own_reference_speedup"] for r in pooled["rows"][:2]] == [10.0, 50.0 / 9.0]
    assert pooled["rows"][2] is table["rows"][2]
    # A full-judge table (no per-shape times) is returned unchanged.
    bare = {"task": "axpby", "rows": [{"config": {}, "verdict": "pass", "speedup": 2.0}]}
    assert pooled_reference(bare) is bare


def test_replay_searches_only_what_an_older_table_measured():
    # A table measured before the seed's SPACE grew (a new value, a new key) replays over the table's own
    # keys and values, in the seed's order, so no proposal lacks a row.
    from benchmarks.probes.search_efficiency import replay, table_candidate

    seed = str(ROOT / "tests" / "data" / "candidates" / "axpby_tunable.py")
    rows = [{"config": {"CHUNK": c}, "verdict": "pass", "speedup": s, "judge_s": 1.0}
            for c, s in ((256, 2.0), (0, 1.0))]
    table = {"task": "axpby", "seed_file": seed, "rows": rows}
    assert dict(table_candidate(table).space) == {"CHUNK": (0, 256)}
    trials, seconds = replay(table, "grid", 0)
    assert (trials, seconds) == (2, 2.0)  # grid in the seed's order: CHUNK 0, then 256 (the best)
