python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD/src:$PWD/benchmarks RATCHET_NCU=off MAX_JOBS=16 || exit
timeout 330 python exp/softmax_smem_probe.py 2>&1 | tee $OUT/softmax_smem_probe.log | grep -v "^\s*$" | tail -30
timeout 200 python exp/pivots_probe.py 2>&1 | tee $OUT/pivots_probe.log | grep -v "^\s*$\|Warn\|warn" | tail -30
