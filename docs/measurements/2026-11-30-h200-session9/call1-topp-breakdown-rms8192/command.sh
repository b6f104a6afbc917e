#!/usr/bin/env bash
# Session 9, call 1: top-p split-row breakdown and ncu; rmsnorm H=8192 against Inductor.
set -u
S=src/ratchet/tasks
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > $OUT/smi.txt
timeout 150 python benchmarks/kernel_breakdown.py --task top_p_sampling --seed-file $S/top_p_sampling/seeds/triton_split_row.py \
  --where B=64 V=129280 > $OUT/topp_breakdown.md 2>&1; echo "breakdown64 rc=$? $(( $(date +%s) - t0 )) s"
timeout 100 python benchmarks/kernel_breakdown.py --task top_p_sampling --seed-file $S/top_p_sampling/seeds/triton_split_row.py \
  --where B=1 V=129280 >> $OUT/topp_breakdown.md 2>&1; echo "breakdown1 rc=$? $(( $(date +%s) - t0 )) s"
timeout 150 python exp/probe_rms8192.py > $OUT/rms8192.log 2>&1; echo "rms rc=$? $(( $(date +%s) - t0 )) s"
NCU=$(env -u RATCHET_NCU python -c "from ratchet.ncu import find_ncu; print(find_ncu()[0])")
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis"
timeout 150 $NCU $sections --clock-control none --profile-from-start off -k "regex:_chunk|_refine|_compact|_finish" -c 4 \
    python -m ratchet.ncu_target --task top_p_sampling --candidate $S/top_p_sampling/seeds/triton_split_row.py --config '{}' \
    --shape '{"B":64,"V":129280}' --dtype float32 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-150 > $OUT/ncu_topp.txt
echo "ncu rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/topp_breakdown.md | grep -E "^\|" | head -40
grep -E "^\|" $OUT/rms8192.log
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit|Waves Per SM|Grid Size|Executed Ipc Active|No Eligible" $OUT/ncu_topp.txt | head -60
