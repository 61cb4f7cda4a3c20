#!/usr/bin/env bash
# Session 27 run 3: the bench's new row, cuBLASLt's fastest listed config (its CUTLASS sm80
# mma.sync kernels on this H100) beside our mma.sync row; every GPU test and --check on the tree.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
TESTS=1 BENCH=1 bash bench/device_run.sh --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^gemm +[0-9]|listed|exit|FAIL|panick" "$OUT/tests-check-bench.txt"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "==> default gemm shapes (square, llm, skinny), timed"
/usr/bin/time -f "%e s" timeout 400 .device/rustile-bench --ops gemm --no-torch > "$OUT/bench-default.txt" 2>&1
grep -E "^gemm +[0-9]|listed| s$" "$OUT/bench-default.txt" | grep -E "mma|cublas |listed| s$"
