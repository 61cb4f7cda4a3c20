#!/usr/bin/env bash
# One call on the GPU machine (no Rust there): the GPU tests, then the bench.
# Binaries are built here and carried in .device/ (see bench/RESULTS.md for how).
# Usage on the device: bash bench/device_run.sh [bench args...]; logs go to $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export RUSTILE_COMMIT=$(cat .device/COMMIT 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
status=0
for t in .device/gpu-* .device/gpu_ops-*; do
    echo "==> $t"
    timeout 240 "$t" --include-ignored --test-threads=1 2>&1 | tee -a "$OUT/gpu_tests.log" || status=1
done
echo "==> bench"
PYTHONUNBUFFERED=1 timeout 420 .device/rustile-bench --json "$OUT/results.json" "$@" 2>&1 | tee "$OUT/bench.log" || status=1
exit $status
