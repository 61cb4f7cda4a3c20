#!/usr/bin/env bash
# Call 8 (the activation-only loop kept to Hopper's kernels, the table's hashes
# re-stamped): every GPU test, the GEMM check, memcheck of the GEMM/MLP and
# training tests, the MLP bench.
set -u
OUT=${OUT:-out}
BENCH=0 bash bench/device_run.sh > "$OUT/tests.txt" 2>&1; echo "tests exit $?" >> "$OUT/tests.txt"
SANITIZE=memcheck SANITIZE_JOBS=4 SANITIZE_TESTS='gemm|mlp' bash bench/device_run.sh > "$OUT/memcheck-gemm.txt" 2>&1; echo "memcheck exit $?" >> "$OUT/memcheck-gemm.txt"
PARTS=sanitize SANITIZE_TOOLS=memcheck bash bench/device_train.sh > "$OUT/memcheck-train.txt" 2>&1; echo "memcheck train exit $?" >> "$OUT/memcheck-train.txt"
TESTS=0 bash bench/device_run.sh --ops mlp --no-torch > "$OUT/mlp.txt" 2>&1; echo "bench exit $?" >> "$OUT/mlp.txt"
rm -rf "$OUT"/sanitize-logs.tgz "$OUT"/train-logs.tgz "$OUT/gpu_tests.log"
grep -E "^test result|FAILED|panicked|check passed|exit" "$OUT/tests.txt"; tail -2 "$OUT/memcheck-gemm.txt"; grep -E "clean|ERRORS|FAILED|exit" "$OUT/memcheck-train.txt" | tail -12; grep -E "^mlp" "$OUT/mlp.txt"
