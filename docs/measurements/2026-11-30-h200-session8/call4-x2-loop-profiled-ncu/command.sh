#!/usr/bin/env bash
# Session 8, call D (two H200s): the loop's first calls split by profiled or not; ncu sections of three kernels.
set -u
cd "$(dirname "$0")"
S=src/ratchet/tasks
t0=$(date +%s)
timeout 200 python benchmarks/loop_throughput.py --task benchmarks/tasks/rmsnorm_decode.py --budget 16 --gpus 0,1 \
  --out $OUT/x2 > $OUT/x2.log 2>&1; echo "x2 rc=$? $(( $(date +%s) - t0 )) s"
NCU=$(env -u RATCHET_NCU python -c "from ratchet.ncu import find_ncu; print(find_ncu()[0])")
echo "ncu: $NCU"
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
nc() { # task candidate config shape kernel-regex
  timeout 90 $NCU $sections --clock-control none --profile-from-start off -k "regex:$5" -c 1 \
    python -m ratchet.ncu_target --task $1 --candidate $2 --config "$3" --shape "$4" --dtype $6 2>&1 \
    | grep -vE "^==PROF==|^\s*$" | cut -c1-150
}
{
nc decode_attention $S/decode_attention/seeds/triton_split_k.py '{"SPLITS":32}' '{"B":1,"Hq":32,"Hkv":8,"L":32768,"D":128}' _split_partials bfloat16
nc softmax $S/softmax/seeds/triton_resident.py '{}' '{"M":64,"N":128256}' _softmax_resident float32
nc rmsnorm $S/rmsnorm/seeds/triton_rowwise.py '{}' '{"T":16384,"H":4096}' _rmsnorm_rows bfloat16
} > $OUT/ncu.txt 2>&1; echo "ncu done $(( $(date +%s) - t0 )) s"
cat $OUT/x2/loop_throughput.txt
python - <<'PY'
import json, os
rows = json.load(open(os.path.join(os.environ["OUT"], "x2", "attempts.json")))
for r in rows:
    h, p = r.get("judge_host_s") or {}, r.get("phases_s") or {}
    print(f"  #{r['number']:2d} wall {r['judge_wall_s'] or 0:5.1f} corr {p.get('correctness', 0):5.1f} "
          f"first {h.get('first_call', 0):5.1f} launch {h.get('first_launch', 0):5.1f} prof {h.get('first_profiled', 0):5.1f} "
          f"wait {h.get('gpu_wait', 0):4.1f} {r['config']}")
PY
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Waves Per SM|Grid Size|Shared Memory Config|L2 Hit|Mem Busy|Max Bandwidth" $OUT/ncu.txt | head -90
