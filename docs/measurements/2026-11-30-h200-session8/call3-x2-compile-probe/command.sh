#!/usr/bin/env bash
# Session 8, call C (two H200s): a fresh Triton compile alone, on each GPU, and two at once.
cd "$(dirname "$0")"
cat /sys/fs/cgroup/cpu.max 2>/dev/null; nproc; lscpu | grep -E "^CPU\(s\)|NUMA node|Model name"
nvidia-smi topo -m 2>/dev/null | head -5
probe() { CUDA_VISIBLE_DEVICES=$1 TRITON_CACHE_DIR=$(mktemp -d) python exp/compile_probe.py $2 $3 $4; }
probe 0 0 8 alone-gpu0
probe 1 0 8 alone-gpu1
probe 0 0 8 alone-gpu0-again
probe 0 1024 4 pair-gpu0 & probe 1 1024 4 pair-gpu1 & wait
probe 0 2048 4 same-gpu0-a & probe 0 2048 4 same-gpu0-b & wait
probe 1 4096 16 same-gpu1-a & probe 1 4096 16 same-gpu1-b & wait
for i in 1 2 3 4; do probe $(( i % 2 )) 1024 8 four-$i & done; wait
