#!/usr/bin/env bash
# Session 26 run 2: the candidate tree (forward STAGES 4 at D = 80, dK/dV STAGES 4
# at D = 80, dQ K/V by TMA at D = 64/128). dK/dV stages 4 against 2 at the vision
# shape, ncu per kernel, then every GPU test, the GEMM check and the bench beside SDPA.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
[ -f .device/bins.tgz ] && tar -C .device -xzf .device/bins.tgz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat .device/COMMIT
VIS=64x256x256x16x16x72
bench() { echo "==> bench RUSTILE_ATTENTION_CONFIG=$1 $2"
  RUSTILE_ATTENTION_CONFIG=$1 timeout 120 .device/rustile-bench --ops attention --attn $2 --no-torch --reps 30 2>&1 | grep -E "^attn"; }
{
for i in 1 2; do bench none $VIS; bench D80_BM64_BN64_WARPS4_OCC2_LATE0_STAGES2 $VIS; done
echo "==> the dK/dV variant's GPU tests"
t=$(ls .device/gpu_ops-* | head -1)
RUSTILE_ATTENTION_CONFIG=D80_BM64_BN64_WARPS4_OCC2_LATE0_STAGES2 timeout 150 $t attention --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked"
} 2>&1 | tee "$OUT/variants.txt"
{
echo "==> ncu vision, default"
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:attention --launch-count 8 --csv \
     .device/rustile-bench --ops attention --attn $VIS --no-torch --reps 3 --json /tmp/ncu.json 2>/dev/null \
   | python3 -c '
import csv,sys
rows=[r for r in csv.reader(sys.stdin) if len(r)>14]
h=rows[0]; k=h.index("Kernel Name"); v=h.index("Metric Value")
for r in rows[1:]: print(r[k][:100], r[v])'
} 2>&1 | tee "$OUT/ncu.txt"
TESTS=1 BENCH=1 bash bench/device_run.sh --ops attention --attn $VIS,16x1024x1024x16x16x72,4x4096x4096x16x16x72,4x4096x4096x16x16x72c,4x4096x4096x16x16x128,4x4096x4096x32x32x64 --reps 30 > "$OUT/tests-check-bench.txt" 2>&1
echo "exit $?" >> "$OUT/tests-check-bench.txt"
grep -E "test result|check passed|^attn.*(rustile|sdpa cudnn|sdpa  )|exit|FAIL|panick" "$OUT/tests-check-bench.txt" | grep -v peak
