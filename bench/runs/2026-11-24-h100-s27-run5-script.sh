#!/usr/bin/env bash
# Session 27 run 5: the committed tree. Every GPU test, --check, then the bench's GEMM rows at
# 4096³ and 8192³ with the new cuBLASLt row (its fastest right listed config) beside our mma.sync
# row; twice more without the tests; the default gemm bench, timed.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
TESTS=1 BENCH=1 bash bench/device_run.sh --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^gemm +[0-9]|listed|exit|FAIL|panick|failed" "$OUT/tests-check-bench.txt" | grep -vE "→|\+bias"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for i in 1 2; do echo "==> round $i"; timeout 300 .device/rustile-bench --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch 2>&1 | grep -E "^gemm +[0-9]|listed|failed" | grep -E "mma|cublas |listed|failed|rustile  "; done | tee "$OUT/repeat.txt"
echo "==> default gemm bench"
/usr/bin/time -f "%e s" timeout 400 .device/rustile-bench --ops gemm --no-torch > "$OUT/bench-default.txt" 2>&1
grep -E "^gemm +[0-9]|listed| s$|failed" "$OUT/bench-default.txt" | grep -E "mma|cublas |listed| s$|failed"
