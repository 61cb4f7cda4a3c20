#!/usr/bin/env bash
# Session 26 run 4: the committed tree (forward STAGES 4 at D = 80, dK/dV STAGES knob at 2, dQ K/V by TMA at
# D = 64/128). Every GPU test, the GEMM check, the bench beside SDPA,
# then the vision shape twice more without torch (spread).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
VIS=64x256x256x16x16x72
TESTS=1 BENCH=1 bash bench/device_run.sh --ops attention --attn $VIS,16x1024x1024x16x16x72,4x4096x4096x16x16x72,4x4096x4096x16x16x72c,4x4096x4096x16x16x128,4x4096x4096x32x32x64 --reps 30 > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^attn.*(rustile|sdpa cudnn|sdpa  )|exit|FAIL|panick" "$OUT/tests-check-bench.txt" | grep -v peak
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for i in 1 2; do echo "==> vision, no torch, round $i"; timeout 120 .device/rustile-bench --ops attention --attn $VIS --no-torch --reps 100 2>&1 | grep -E "^attn"; done | tee "$OUT/vision-repeat.txt"
