#!/bin/bash
# On the GPU (dr69's binaries): every Hopper forward config against float64
# (causal grids heaviest first), which the attention filter of dr68/dr70 missed.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
timeout 300 $G --include-ignored --test-threads=1 every_hopper > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
grep -E "^test |test result|rc=|panicked" $L/tests.log | cut -c1-200
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
