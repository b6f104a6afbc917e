python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD/src:$PWD/benchmarks RATCHET_NCU=off MAX_JOBS=16 || exit
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 240 python exp/pivots_probe.py 2>&1 | tee $OUT/pivots_probe.log | grep -v "^\s*$" | tail -80
timeout 150 python -m pytest -q -x tests/test_task_top_p_sampled_pivots.py 2>&1 | tail -15 | tee $OUT/pytest.log
timeout 150 python benchmarks/eval_seeds.py --first-dtype --repeats 1 --out $OUT/goals --tasks top_p_sampling --seeds sampled_pivots --where B=64 > $OUT/eval.log 2>&1; tail -5 $OUT/eval.log; grep "^| top_p" $OUT/goals/eval_seeds.md
