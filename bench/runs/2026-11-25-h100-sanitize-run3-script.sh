#!/usr/bin/env bash
# The GPU tests and --check as they run normally, racecheck over --check with cuBLAS's
# kernels excluded, then rustile-tune (the DSL's edge copies changed, so every tuned op's
# source hash did).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
SANITIZE=racecheck SANITIZE_TESTS='^$' bash bench/device_run.sh > "$OUT/racecheck-check.txt" 2>&1; echo "racecheck --check: exit $?"
tail -2 "$OUT/racecheck-check.txt"
TESTS=1 TUNE=1 TUNE_S=270 BENCH=0 bash bench/device_run.sh > "$OUT/tests-check-tune.txt" 2>&1; echo "tests, check, tune: exit $?"
grep -E "test result|check passed|FAILED|panicked|SKIPPED" "$OUT/tests-check-tune.txt"
tail -3 "$OUT/tests-check-tune.txt"
