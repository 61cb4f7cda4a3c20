#!/bin/bash
# delta rule backward: GPU tests (forward and backward), memcheck of the backward test
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
timeout 280 $G --include-ignored --test-threads=1 --nocapture delta_rule > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
timeout 280 compute-sanitizer --tool memcheck --error-exitcode 86 $G --exact delta_rule_backward_matches_float64 --include-ignored --test-threads=1 > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
grep -E "off by|test result|panicked|rc=" $OUT/test.log | sed 's/(seed [0-9]*)//' | cut -c1-230; tail -4 $OUT/memcheck.log
