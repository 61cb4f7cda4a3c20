#!/usr/bin/env bash
# Session 25 run 6: the final tree (the side-stream guard): every GPU test, then the vision shape beside SDPA.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
TESTS=1 BENCH=1 bash bench/device_run.sh --ops attention --attn 64x256x256x16x16x72 --reps 100 > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^attn.*(rustile|sdpa cudnn|sdpa  )|exit|FAIL|panick" "$OUT/tests-check-bench.txt" | grep -v peak
