#!/usr/bin/env bash
# Session 10, call 4: softmax variants (reverse pass 2, hints), ncu on softmax online and on split-row top-p.
set -u
S=src/ratchet/tasks
t0=$(date +%s)
timeout 200 python exp/softmax_probe.py 2>&1 | grep -v Warn > $OUT/softmax_probe.log; echo "softmax probe rc=$? $(( $(date +%s) - t0 )) s"
NCU=$(env -u RATCHET_NCU python -c "from ratchet.ncu import find_ncu; print(find_ncu()[0])")
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
timeout 100 $NCU $sections --clock-control none --profile-from-start off -k "regex:_online|_combine" -c 2 \
    python -m ratchet.ncu_target --task softmax --candidate $S/softmax/seeds/triton_online.py --config '{}' \
    --shape '{"M":64,"N":128256}' --dtype float32 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-160 > $OUT/ncu_softmax.txt
echo "ncu softmax rc=$? $(( $(date +%s) - t0 )) s"
timeout 150 $NCU $sections --section InstructionStats --clock-control none --profile-from-start off -k "regex:_chunk|_refine|_compact|_finish" -c 4 \
    python -m ratchet.ncu_target --task top_p_sampling --candidate $S/top_p_sampling/seeds/triton_split_row.py \
    --config '{"BLOCK":256,"PROGRAMS":2048,"num_warps":4}' \
    --shape '{"B":64,"V":129280}' --dtype float32 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-160 > $OUT/ncu_topp.txt
echo "ncu topp rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $OUT/softmax_probe.log
for f in $OUT/ncu_softmax.txt $OUT/ncu_topp.txt; do
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Waves Per SM|Executed Ipc Active|L2 Hit Rate|L1/TEX Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Memory Throughput|stalled|represents" $f | cut -c1-140 | head -90
done
