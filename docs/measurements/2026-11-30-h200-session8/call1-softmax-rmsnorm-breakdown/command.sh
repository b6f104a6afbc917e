#!/usr/bin/env bash
# Session 8, call A (one H200): softmax resident full eval, rmsnorm largest-shape variants, kernel breakdowns.
set -u
cd "$(dirname "$0")"
S=src/ratchet/tasks
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt
t0=$(date +%s)
timeout 170 python benchmarks/eval_seeds.py --tasks softmax --seeds resident --first-dtype --repeats 1 \
  --out $OUT/softmax_full > $OUT/softmax_full.log 2>&1; echo "softmax_full rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python benchmarks/eval_seeds.py --tasks softmax --seeds resident --first-dtype --repeats 1 --where N=128256 \
  --config '{"BLOCK_N":32768,"num_warps":32}' '{"BLOCK_N":8192,"num_warps":16}' \
  --out $OUT/softmax_cfg > $OUT/softmax_cfg.log 2>&1; echo "softmax_cfg rc=$? $(( $(date +%s) - t0 )) s"
timeout 220 python benchmarks/eval_seeds.py --tasks rmsnorm --seed-files exp/rmsnorm_rows.py --where T=16384 H=4096 \
  --first-dtype --repeats 1 --config '{"ROWS":1}' '{"ROWS":1,"num_warps":4}' '{"ROWS":1,"num_warps":16}' \
  '{"ROWS":2}' '{"ROWS":4,"num_warps":16}' '{"ROWS":1,"STREAM":1}' '{"ROWS":2,"STREAM":1}' \
  --out $OUT/rms_rows > $OUT/rms_rows.log 2>&1; echo "rms_rows rc=$? $(( $(date +%s) - t0 )) s"
timeout 40 python benchmarks/eval_seeds.py --tasks rmsnorm --seeds rowwise --where T=16384 H=4096 --first-dtype \
  --repeats 1 --out $OUT/rms_base > $OUT/rms_base.log 2>&1; echo "rms_base rc=$? $(( $(date +%s) - t0 )) s"
{
timeout 60 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file $S/decode_attention/seeds/triton_split_k.py --where B=1 Hkv=8
timeout 60 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file $S/decode_attention/seeds/triton_split_k.py --where B=1 Hkv=8 --config '{"SPLITS":32}'
timeout 60 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file $S/decode_attention/seeds/triton_split_k.py --where Hkv=1
timeout 40 python benchmarks/kernel_breakdown.py --task softmax --seed-file $S/softmax/seeds/triton_resident.py --where M=64 N=128256
timeout 40 python benchmarks/kernel_breakdown.py --task softmax --seed-file $S/softmax/seeds/triton_online.py --where M=64 N=128256
} > $OUT/breakdown.md 2>&1; echo "breakdown $(( $(date +%s) - t0 )) s"
for f in softmax_full softmax_cfg rms_rows rms_base; do tail -n +1 $OUT/$f/eval_seeds.md 2>/dev/null | grep -v "^|---"; done
grep -v "^|---" $OUT/breakdown.md | cut -c1-200
