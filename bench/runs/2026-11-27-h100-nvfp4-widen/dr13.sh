#!/bin/bash
# On the H100: the NVFP4 GPU tests (dual and single GEMM, quantize), memcheck of the small ones, then the NVFP4 bench.
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
timeout 240 $G nvfp4 --include-ignored --test-threads=1 > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
grep -E "^test |panicked|test result|rc=" $OUT/test.log | cut -c1-300
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_odd_shapes nvfp4_quantize_matches_the_reference_bit_for_bit > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
grep -E "ERROR SUMMARY|test result|rc=" $OUT/memcheck.log | tail -3
timeout 300 .device/rustile-bench --ops dual_gemm_nvfp4 --no-torch --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "nvfp4|rc=" $OUT/bench.log | grep -v "sampled rows" | cut -c1-400 | tail -40
