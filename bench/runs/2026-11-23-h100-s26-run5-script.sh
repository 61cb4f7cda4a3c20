#!/usr/bin/env bash
# Session 26 run 5 (review): dK/dV's STAGES as a local constant (the four-stage config gone),
# dQ's tensor maps built only for TMA configs. Every GPU test, then the vision shape
# beside SDPA, then twice without torch.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
VIS=64x256x256x16x16x72
TESTS=1 BENCH=1 bash bench/device_run.sh --ops attention --attn $VIS,4x4096x4096x16x16x128 --reps 30 > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^attn.*(rustile|sdpa cudnn|sdpa  )|exit|FAIL|panick" "$OUT/tests-check-bench.txt" | grep -v peak
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for i in 1 2; do echo "==> vision, no torch, round $i"; timeout 120 .device/rustile-bench --ops attention --attn $VIS --no-torch --reps 100 2>&1 | grep -E "^attn"; done | tee "$OUT/vision-repeat.txt"
