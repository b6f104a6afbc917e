#!/usr/bin/env bash
# Session 8, call F (one H200, new flush): split-K with the merge in its last program against the merge kernel;
# softmax resident at 64 x 128256 under a graph.
set -u
cd "$(dirname "$0")"
S=src/ratchet/tasks
t0=$(date +%s)
timeout 130 python benchmarks/eval_seeds.py --tasks decode_attention --seeds split_k --where B=1 Hkv=8 --first-dtype \
  --repeats 1 --config '{"FUSE_MERGE":0}' '{}' '{"SPLITS":32}' --out $OUT/splitk > $OUT/splitk.log 2>&1
echo "splitk rc=$? $(( $(date +%s) - t0 )) s"
timeout 45 python benchmarks/kernel_breakdown.py --task decode_attention --seed-file $S/decode_attention/seeds/triton_split_k.py \
  --where B=1 Hq=32 Hkv=8 > $OUT/breakdown.md 2>&1; echo "breakdown $(( $(date +%s) - t0 )) s"
timeout 100 python benchmarks/suite.py --tasks softmax --shapes 3 --peers best --best softmax=$S/softmax/seeds/triton_resident.py \
  --graph-below 100 --out $OUT/softmax > $OUT/softmax.log 2>&1; echo "softmax rc=$? $(( $(date +%s) - t0 )) s"
rm -f $OUT/softmax/suite.csv
grep -E "^\|" $OUT/splitk/eval_seeds.md | grep -v -- "---"
grep -E "partials|merge|graph|sum" $OUT/breakdown.md
grep -E "^\| softmax" $OUT/softmax/suite.md
grep -E "pass|fail|error" $OUT/splitk.log | head -5
