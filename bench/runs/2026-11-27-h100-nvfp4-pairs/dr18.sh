#!/bin/bash
# On the H100: the NVFP4 GPU tests, memcheck and racecheck
# of the odd shapes (every config), then the NVFP4 bench.
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
for i in 1; do
    timeout 60 $G nvfp4 --include-ignored --test-threads=1 >> $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
done
grep -E "^test |panicked|test result|rc=" -A1 $OUT/test.log | grep -v "^--" | cut -c1-300 | sort | uniq -c
for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 86 $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_odd_shapes > $OUT/$tool.log 2>&1; echo "$tool rc=$?" >> $OUT/$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|rc=" $OUT/$tool.log | tail -3
done
timeout 150 .device/rustile-bench --ops dual_gemm_nvfp4 --no-torch --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "every config|geometric|rc=" $OUT/bench.log | cut -c1-900
