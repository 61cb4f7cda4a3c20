#!/usr/bin/env bash
# Session 26 run 1: K/V stages of the Hopper forward (STAGES 2/3/4), clusters
# with TMA multicast (forward CLUSTER 2 at D = 80, dQ CLUSTER 4 at D = 80, dQ's
# K/V by TMA everywhere). Attention GPU tests under each forced variant, bench
# of each variant (no torch), ncu per kernel.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
[ -f .device/bins.tgz ] && tar -C .device -xzf .device/bins.tgz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat .device/COMMIT
t=$(ls .device/gpu_ops-* | head -1)
tests() { echo "==> GPU attention tests, RUSTILE_ATTENTION_CONFIG=$1"
  RUSTILE_ATTENTION_CONFIG=$1 timeout 150 $t attention --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|FAIL|Error|error" | head -20; echo "exit ${PIPESTATUS[0]}"; }
{
tests none
tests STAGES4_CLUSTER1,LATE0_CLUSTER4
tests STAGES2_CLUSTER2,LATE1_CLUSTER4
tests STAGES4_CLUSTER2
} 2>&1 | tee "$OUT/gpu-tests.txt"
V=64x256x256x16x16x72,16x1024x1024x16x16x72,4x4096x4096x16x16x72
bench() { echo "==> bench RUSTILE_ATTENTION_CONFIG=$1 $2"
  RUSTILE_ATTENTION_CONFIG=$1 timeout 120 .device/rustile-bench --ops attention --attn $2 --no-torch --reps 30 2>&1 | grep -v "^ *$" | grep -E "µs|rustile|rror"; }
{
bench none $V,4x4096x4096x16x16x128,4x4096x4096x32x32x64
bench STAGES3_CLUSTER1,LATE0_CLUSTER4 $V,4x4096x4096x32x32x64
bench STAGES4_CLUSTER1,LATE1_CLUSTER4 $V
bench STAGES2_CLUSTER2 $V
bench STAGES4_CLUSTER2 $V
bench none 64x256x256x16x16x72
} 2>&1 | tee "$OUT/variants.txt"
ncu_k() { # shape, kernel regex, count, config
  RUSTILE_ATTENTION_CONFIG=$4 timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum \
     -k regex:$2 --launch-count $3 --csv \
     .device/rustile-bench --ops attention --attn $1 --no-torch --reps 3 --json /tmp/ncu.json 2>/dev/null \
   | python3 -c '
import csv,sys
rows=[r for r in csv.reader(sys.stdin) if len(r)>14]
h=rows[0]; k=h.index("Kernel Name"); m=h.index("Metric Name"); v=h.index("Metric Value")
for r in rows[1:]: print(r[k][:100], r[v])'
}
{
for c in none LATE0_CLUSTER4 LATE1_CLUSTER4; do echo "==> ncu dQ vision $c"; ncu_k 64x256x256x16x16x72 attention_bwd_q 3 $c; done
for c in none STAGES4_CLUSTER1 STAGES2_CLUSTER2; do echo "==> ncu forward vision $c"; ncu_k 64x256x256x16x16x72 attention_fwd 3 $c; done
} 2>&1 | tee "$OUT/ncu.txt"
