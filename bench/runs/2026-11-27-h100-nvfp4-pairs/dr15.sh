#!/bin/bash
# On the H100: the NVFP4 tests, memcheck and bench (dr13), then one Nsight Compute
# profile of the Hopper kernel's default config with stall reasons by SASS line.
OUT=${OUT:-out}; mkdir -p $OUT
bash .device/dr13.sh
G=$(ls .device/gpu_ops-* | head -1)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -z "$NCU" ] && { echo "no ncu"; exit 0; }
timeout 240 $NCU --kernel-name regex:dual_gemm_nvfp4_wgmma.*OCC3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis \
    --import-source no -o $OUT/prof $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_gpu_modes_shapes > $OUT/ncu-run.log 2>&1
echo "ncu rc=$?" >> $OUT/ncu-run.log
$NCU -i $OUT/prof.ncu-rep --print-details all > $OUT/ncu.log 2>&1
$NCU -i $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>$OUT/source.err
ls -la $OUT; grep -E "Duration|Stall|Eligible|Issued|Throughput|rc=" $OUT/ncu.log | head -40
