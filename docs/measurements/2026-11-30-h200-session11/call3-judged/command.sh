python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD/src:$PWD/benchmarks RATCHET_NCU=off MAX_JOBS=16 || exit
t0=$(date +%s)
timeout 300 python -m pytest -p no:cacheprovider -q -m gpu -rA tests/test_cuda_build.py -k softmax \
  tests/test_task_top_p_sampled_pivots.py > $OUT/pytest_gpu.log 2>&1; echo "tests rc=$? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest_gpu.log | tail -14
timeout 120 python benchmarks/eval_seeds.py --tasks softmax --seeds cluster --shapes 3 --first-dtype --repeats 1 \
  --out $OUT/cluster > $OUT/cluster.log 2>&1; echo "cluster rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python benchmarks/eval_seeds.py --tasks top_p_sampling --seeds sampled_pivots --where B=64 --first-dtype --repeats 1 \
  --out $OUT/pivots > $OUT/pivots.log 2>&1; echo "pivots rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\| (softmax|top_p)" $OUT/cluster/eval_seeds.md $OUT/pivots/eval_seeds.md
