#!/bin/bash
# On the H100: the NVFP4 tests, memcheck and bench (dr13), then stall profiles
# (prof.sh) of the warp-specialized kernel with one and two widening warpgroups.
OUT=${OUT:-out}; mkdir -p $OUT
bash .device/dr13.sh   # bench/runs/2026-11-27-h100-nvfp4-widen/dr13.sh
for w in 1 2; do
    bash .device/prof.sh "dual_gemm_nvfp4_ws_kernel__.*WIDENERS${w}_STAGES4" > /dev/null 2>&1
    mv $OUT/hot.txt $OUT/hot-w$w.txt; mv $OUT/ncu.log $OUT/ncu-w$w.log; tail -3 $OUT/ncu-run.log
    head -25 $OUT/hot-w$w.txt | cut -c1-160
done
rm -f $OUT/ncu-run.log $OUT/bench-roofline.svg
