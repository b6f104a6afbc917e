python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD/src:$PWD/benchmarks RATCHET_NCU=off MAX_JOBS=16 || exit
timeout 200 python exp/finish_probe.py 2>&1 | tee $OUT/finish_probe.log | grep -v "^\s*$" | tail -26
for f in exp/split_row_old.py src/ratchet/tasks/top_p_sampling/seeds/triton_split_row.py; do
  timeout 60 python benchmarks/kernel_breakdown.py --task top_p_sampling --seed-file $f --where B=64 V=129280 \
    --config '{"BLOCK":256,"PROGRAMS":2048,"num_warps":4}' --calls 10 2>&1 | tail -8
done | tee $OUT/breakdown.log
timeout 200 python -m pytest -p no:cacheprovider -q -m gpu -rA tests/test_task_top_p_split_row.py > $OUT/pytest_split_row.log 2>&1; echo "tests rc=$?"
grep -E "FAILED|ERROR|passed|failed" $OUT/pytest_split_row.log | tail -6
