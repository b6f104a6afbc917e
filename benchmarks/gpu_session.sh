#!/usr/bin/env bash
# One lease on the H200, every GPU measurement the open issues need, in order of value. Logs and tables
# go to $OUT. Each stage has its own time limit (seconds, env); STAGES picks which run (default: all).
#   STAGES="smoke tests seeds search loop" bash benchmarks/gpu_session.sh
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
STAGES=${STAGES:-"smoke tests seeds search loop"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/smi.txt"
for stage in $STAGES; do
  case $stage in
    smoke) timeout "${SMOKE_S:-150}" python benchmarks/judge_smoke_gpu.py --out "$OUT" > "$OUT/smoke.log" 2>&1 ;;
    tests) timeout "${TESTS_S:-240}" python -m pytest -q -p no:cacheprovider -m gpu ${PYTEST_ARGS:-tests} > "$OUT/pytest_gpu.log" 2>&1 ;;
    seeds) timeout "${SEEDS_S:-600}" python benchmarks/eval_seeds.py --tasks top_p_sampling rmsnorm --seeds triton \
             --repeats "${SEEDS_REPEATS:-2}" --out "$OUT" > "$OUT/eval_seeds.log" 2>&1 ;;
    search) timeout "${SEARCH_S:-600}" python benchmarks/search_efficiency.py --task rmsnorm \
             --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --out "$OUT" > "$OUT/search.log" 2>&1 ;;
    phases) timeout "${PHASES_S:-90}" python benchmarks/judge_phase_costs.py --task rmsnorm --shapes 4 \
             --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --out "$OUT" > "$OUT/phases.log" 2>&1 ;;
    guard) timeout "${GUARD_S:-150}" python benchmarks/guard_cost.py --task rmsnorm --repeats 2 --shapes 4 \
             --seed-file src/ratchet/tasks/rmsnorm/seeds/triton_rowwise.py --out "$OUT" > "$OUT/guard.log" 2>&1 ;;
    seeds_all) timeout "${SEEDS_ALL_S:-300}" python benchmarks/eval_seeds.py --repeats 1 --seeds triton \
             --tasks add_rmsnorm silu_mul softmax rope --out "$OUT/all" > "$OUT/eval_seeds_all.log" 2>&1 ;;
    loop) timeout "${LOOP_S:-300}" python benchmarks/loop_throughput.py --task rmsnorm --budget 8 --out "$OUT" \
             > "$OUT/loop.log" 2>&1 ;;
  esac
  echo "== $stage: exit $?"
done
for f in smoke.log pytest_gpu.log eval_seeds.md search_efficiency.md loop_throughput.txt guard_cost.md judge_phase_costs.md all/eval_seeds.md; do
  [ -f "$OUT/$f" ] && { echo "== $f"; tail -20 "$OUT/$f"; }
done
