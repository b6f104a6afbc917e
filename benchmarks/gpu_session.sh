#!/usr/bin/env bash
# One short lease on the H200: GPU tests of the judge, then the judge's smoke benchmark. Logs go to $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/smi.txt"
timeout "${SMOKE_S:-150}" python benchmarks/judge_smoke_gpu.py --out "$OUT" 2>&1 | tee "$OUT/smoke.log"
timeout "${TESTS_S:-120}" python -m pytest -q -p no:cacheprovider -m gpu tests/redteam tests/test_judge_basic.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
cat "$OUT/smoke.log" | tail -12
