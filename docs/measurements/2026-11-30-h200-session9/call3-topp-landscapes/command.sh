#!/usr/bin/env bash
# Session 9, call 3: the split-row and pivot top-p SPACEs at B=64 (landscape, issue 4's search efficiency; issue 5's best config).
set -u
S=src/ratchet/tasks/top_p_sampling/seeds
t0=$(date +%s)
timeout 500 python benchmarks/search_efficiency.py --task benchmarks/tasks/top_p_b64.py --seed-files $S/triton_split_row.py \
  $S/triton_pivot.py --shapes 1 --out $OUT/search_topp > $OUT/search_topp.log 2>&1; echo "search rc=$? $(( $(date +%s) - t0 )) s"
tail -30 $OUT/search_topp/search_efficiency.md 2>/dev/null || tail -30 $OUT/search_topp.log
ls $OUT/search_topp
python - <<'PY'
import json, glob, os
for f in glob.glob(os.path.join(os.environ["OUT"], "search_topp", "landscapes", "*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, e); continue
    rows = d.get("rows") or d.get("configs") or (d if isinstance(d, list) else [])
    print(f, type(d).__name__, len(rows))
    def key(r):
        return -(r.get("speedup") or 0)
    for r in sorted([r for r in rows if isinstance(r, dict)], key=key)[:8]:
        print("  ", r.get("config"), r.get("speedup"), r.get("verdict"), {k: v for k, v in r.items() if k not in ("config", "speedup", "verdict", "reason")})
PY
