#!/usr/bin/env bash
# Session 9, call 2: rmsnorm reload variants; split-K wide configs at B=1; softmax single-kernel L2 variants.
set -u
t0=$(date +%s)
timeout 120 python exp/probe2.py rms > $OUT/rms.log 2>&1; echo "rms rc=$? $(( $(date +%s) - t0 )) s"
for cfg in '{}' '{"SPLITS":64}' '{"SPLITS":64,"BLOCK_L":32}' '{"SPLITS":128,"BLOCK_L":32}' '{"SPLITS":256,"BLOCK_L":16}' '{"SPLITS":128,"BLOCK_L":16,"num_warps":2}' '{"SPLITS":32,"BLOCK_L":32}'; do
  echo "== config $cfg" >> $OUT/splitk.md
  timeout 60 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file exp/split_k_wide.py \
    --where B=1 Hq=32 Hkv=8 --config "$cfg" >> $OUT/splitk.md 2>&1
done; echo "splitk rc=$? $(( $(date +%s) - t0 )) s"
timeout 200 python exp/probe2.py softmax > $OUT/softmax.log 2>&1; echo "softmax rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $OUT/rms.log
grep -E "^== config|one call|sum of kernels|_split_partials|_merge" $OUT/splitk.md
grep -E "^\||Error|error" $OUT/softmax.log | head -60
