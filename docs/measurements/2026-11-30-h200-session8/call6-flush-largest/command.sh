#!/usr/bin/env bash
# Session 8, call E (one H200): the flusher's GPU tests, its cost table, the largest shapes under the new flush.
set -u
cd "$(dirname "$0")"
t0=$(date +%s)
timeout 120 python -m pytest -q -m gpu tests/test_l2_flusher.py tests/test_judge_launch_hold.py -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log
timeout 60 python benchmarks/flush_cost.py --out $OUT/flush_cost.md > /dev/null 2>&1; echo "flush_cost rc=$?"
timeout 150 python benchmarks/eval_seeds.py --tasks rmsnorm add_rmsnorm --seeds rowwise fused --where T=16384 --first-dtype \
  --repeats 1 --out $OUT/largest_norms > $OUT/largest_norms.log 2>&1; echo "norms rc=$? $(( $(date +%s) - t0 )) s"
timeout 90 python benchmarks/eval_seeds.py --tasks silu_mul --seeds flat --where T=4096 --first-dtype \
  --repeats 1 --out $OUT/largest_silu > $OUT/largest_silu.log 2>&1; echo "silu rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/flush_cost.md
grep -E "^\|" $OUT/largest_norms/eval_seeds.md $OUT/largest_silu/eval_seeds.md | grep -v -- "---" | cut -d: -f2-
