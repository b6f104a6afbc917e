#!/usr/bin/env bash
# Session 8, call B (two H200s): where a candidate's first call spends its time with two workers per machine.
set -u
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt
nproc > $OUT/nproc.txt
t0=$(date +%s)
timeout 200 python benchmarks/loop_throughput.py --task benchmarks/tasks/rmsnorm_decode.py --budget 16 --gpus 0,1 \
  --out $OUT/x2 > $OUT/x2.log 2>&1; echo "x2 rc=$? $(( $(date +%s) - t0 )) s"
timeout 200 python benchmarks/loop_throughput.py --task benchmarks/tasks/rmsnorm_decode.py --budget 16 \
  --out $OUT/x1 > $OUT/x1.log 2>&1; echo "x1 rc=$? $(( $(date +%s) - t0 )) s"
for c in '{"SPLITS":32}' '{"SPLITS":32,"STAGES":4}' '{"SPLITS":32,"BLOCK_L":128}' '{"SPLITS":32,"BLOCK_L":128,"STAGES":2}' \
         '{"SPLITS":32,"num_warps":8}' '{"SPLITS":32,"BLOCK_L":32,"STAGES":5}' '{"SPLITS":64,"BLOCK_L":32,"STAGES":5}' \
         '{"SPLITS":16,"BLOCK_L":128,"STAGES":3,"num_warps":8}'; do
  timeout 40 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file exp/split_k_stages.py \
    --where B=1 Hq=32 L=32768 --config "$c" 2>/dev/null | grep -v "^|---"
done > $OUT/splitk_cfg.md; echo "splitk_cfg $(( $(date +%s) - t0 )) s"
grep -E "NVIDIA|graph|partials" $OUT/splitk_cfg.md | cut -c1-160
cat $OUT/x2/loop_throughput.txt $OUT/x1/loop_throughput.txt
python - <<'PY'
import json, os
for name in ("x2", "x1"):
    try:
        rows = json.load(open(os.path.join(os.environ["OUT"], name, "attempts.json")))
    except OSError:
        continue
    print(name)
    for r in rows:
        h, p = r.get("judge_host_s") or {}, r.get("phases_s") or {}
        print(f"  #{r['number']:2d} wall {r['judge_wall_s'] or 0:5.1f} start {p.get('start', 0):4.1f} corr {p.get('correctness', 0):5.1f} "
              f"first {h.get('first_call', 0):5.1f} launch {h.get('first_launch', 0):5.1f} prof {h.get('first_profiled', 0):5.1f} wait {h.get('gpu_wait', 0):4.1f} "
              f"timing {p.get('timing', 0):4.1f}")
PY
