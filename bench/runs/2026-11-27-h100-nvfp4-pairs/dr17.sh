#!/bin/bash
# On the H100: the NVFP4 GPU tests (the failures' messages shown), then stall
# profiles of the warp-specialized kernel (one and two widening warpgroups).
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
G=$(ls .device/gpu_ops-* | head -1)
timeout 240 $G nvfp4 --include-ignored --test-threads=1 > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
grep -E "^test |panicked|test result|rc=" -A1 $OUT/test.log | cut -c1-300
for w in 1 2; do
    bash .device/prof.sh "dual_gemm_nvfp4_ws_kernel__.*WIDENERS${w}_STAGES4" > /dev/null 2>&1
    mv $OUT/hot.txt $OUT/hot-w$w.txt; mv $OUT/ncu.log $OUT/ncu-w$w.log; tail -2 $OUT/ncu-run.log; rm -f $OUT/ncu-run.log
    head -25 $OUT/hot-w$w.txt | cut -c1-160
done
