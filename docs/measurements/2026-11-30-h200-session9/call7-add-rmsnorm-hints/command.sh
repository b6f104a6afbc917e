#!/usr/bin/env bash
# Session 9, call 7: add_rmsnorm with evict_last hints; split-row top-p's _finish with more warps.
set -u
t0=$(date +%s)
timeout 150 python exp/probe3.py > $OUT/add_rms.log 2>&1; echo "add_rms rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python exp/probe4.py > $OUT/topp_finish.log 2>&1; echo "topp rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\||Error" $OUT/add_rms.log $OUT/topp_finish.log | cut -d: -f2- | head -80
