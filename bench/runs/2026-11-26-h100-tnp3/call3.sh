#!/usr/bin/env bash
# Call 3 (after the activation-only epilogue path, a GEMM kernel change): every
# GPU test, the GEMM family's check, and the sm90 table re-tuned for the new
# kernel sources (into $OUT/sm90.toml, to be compiled in for call 4).
set -u
OUT=${OUT:-out}
TESTS=1 TUNE=1 BENCH=0 TUNE_S=330 bash bench/device_run.sh > "$OUT/tests-tune.txt" 2>&1; echo "tests+tune exit $?" >> "$OUT/tests-tune.txt"
grep -E "^test result|FAILED|panicked|passed|failed" "$OUT/tests-tune.txt" | tail -30; tail -5 "$OUT/tune.log"
