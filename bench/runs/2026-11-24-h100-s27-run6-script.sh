#!/usr/bin/env bash
# Session 27 run 6 (review): the refactored cuBLASLt paths: the GEMM's cuBLASLt mma.sync row and the
# FP8 GEMM beside cuBLASLt, plus --check of the GEMM family (gemm, dual_gemm, gemm_fp8).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
TESTS=0 BENCH=1 bash bench/device_run.sh --ops gemm,gemm_fp8 --mnk 4096x4096x4096,8192x8192x8192 --no-torch > "$OUT/bench.txt" 2>&1
echo "exit $?" >> "$OUT/bench.txt"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 120 .device/rustile-bench --check --ops gemm,dual_gemm,gemm_fp8 --mnk 777x1030x520,4096x4096x4096 > "$OUT/check.txt" 2>&1; echo "check exit $?" >> "$OUT/check.txt"
grep -E "^gemm|listed|exit|failed|check passed" "$OUT/bench.txt" "$OUT/check.txt" | grep -E "mma|cublas|listed|exit|failed|check passed|fp8"
