#!/usr/bin/env bash
# Session 10, call 8: cluster softmax GPU tests; softmax judged beside torch.compile and Liger (online seed
# as best) and the cluster seed judged at the same shapes.
set -u
S=src/ratchet/tasks
t0=$(date +%s)
timeout 200 python -m pytest -p no:cacheprovider -q -m gpu -rA tests/test_cuda_build.py -k softmax tests/test_task_softmax.py \
  > $OUT/pytest_softmax.log 2>&1; echo "tests rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/pytest_softmax.log
timeout 220 python benchmarks/suite.py --tasks softmax --shapes 3 --peers torch_compile liger best \
  --best softmax=$S/softmax/seeds/triton_online.py --graph-below 100 --out $OUT/suite > $OUT/suite.log 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; rm -f $OUT/suite/suite.csv
timeout 150 python benchmarks/eval_seeds.py --tasks softmax --seeds cluster --shapes 3 --first-dtype --repeats 1 \
  --out $OUT/cluster > $OUT/cluster.log 2>&1; echo "cluster rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $OUT/suite/suite.md | head -12
grep -E "^\|" $OUT/cluster/eval_seeds.md | head -12
