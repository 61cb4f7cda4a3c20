#!/bin/bash
# On the H100: dr13 (NVFP4 tests, memcheck, bench), then one Nsight Compute profile of the Hopper kernel.
OUT=${OUT:-out}; mkdir -p $OUT
bash .device/dr13.sh
G=$(ls .device/gpu_ops-* | head -1)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
[ -n "$NCU" ] && timeout 200 $NCU --kernel-name regex:dual_gemm_nvfp4_wgmma --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_gpu_modes_shapes > $OUT/ncu.log 2>&1; echo "ncu rc=$?" >> $OUT/ncu.log
grep -E "Duration|Throughput|Stall|Issued|Eligible|Active Warps|Achieved Occupancy|Registers|Block Limit|No Eligible|rc=" $OUT/ncu.log | head -60
