#!/bin/bash
# On the H100: the NVFP4 GPU tests (the single product's warp-specialized
# kernel added), memcheck and racecheck of the odd shapes (every config of
# both products), the tuner for both ops, then the NVFP4 bench.
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
G=$(ls .device/gpu_ops-* | head -1)
timeout 60 $G nvfp4 --include-ignored --test-threads=1 > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
grep -E "^test |panicked|test result|rc=" $OUT/test.log | cut -c1-300
for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 86 $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_odd_shapes > $OUT/$tool.log 2>&1; echo "$tool rc=$?" >> $OUT/$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|rc=" $OUT/$tool.log | tail -3
done
cp tuned/sm90.toml $OUT/sm90.toml
for op in dual_gemm_nvfp4 gemm_nvfp4; do
    timeout 100 .device/rustile-tune --arch sm90 --op $op --out $OUT/sm90.toml >> $OUT/tune.log 2>&1; echo "tune $op rc=$?" >> $OUT/tune.log
done
grep -E "bucket|rc=|error" $OUT/tune.log | cut -c1-200
timeout 150 .device/rustile-bench --ops dual_gemm_nvfp4 --no-torch --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "geometric|rc=|ours |single" $OUT/bench.log | cut -c1-400
rm -f $OUT/*.svg
