#!/usr/bin/env bash
# Session 25 run 2: dK/dV and dQ on two streams (Gpu::concurrently): the new ordering test,
# the attention GPU tests, then the backward serial / dK/dV first / dQ first (RUSTILE_EXP), twice.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
[ -f .device/bins.tgz ] && tar -C .device -xzf .device/bins.tgz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat .device/COMMIT
t=$(ls .device/gpu_ops-* | head -1)
echo "==> $t concurrent attention"; timeout 200 $t concurrent attention --include-ignored --test-threads=1 2>&1 | tail -8 | tee "$OUT/gpu-tests.txt"
for round in 1 2; do
for exp in serial kvfirst dqfirst; do
  echo "==> round $round $exp"
  RUSTILE_EXP=$exp timeout 100 .device/rustile-bench --ops attention --attn 64x256x256x16x16x72,16x1024x1024x16x16x72,4x4096x4096x16x16x72,4x4096x4096x16x16x128 --no-torch --reps 30 2>&1 | grep -E "^attn_bwd"
done
done 2>&1 | tee "$OUT/variants.txt"
