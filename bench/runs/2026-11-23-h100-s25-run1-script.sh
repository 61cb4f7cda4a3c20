#!/usr/bin/env bash
# Session 25 run 1: delta computed in the dQ kernel (no rows kernel on Hopper);
# a 256-row (4-warpgroup) forward variant at D = 80. Attention GPU tests, ncu, bench.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
[ -f .device/bins.tgz ] && tar -C .device -xzf .device/bins.tgz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat .device/COMMIT
t=$(ls .device/gpu_ops-* | head -1)
echo "==> $t attention"; timeout 200 $t attention --include-ignored --test-threads=1 2>&1 | tail -8 | tee "$OUT/gpu-tests.txt"
ncu_k() { # shape, kernel regex, count, env
  env $4 timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum \
     -k regex:$2 --launch-count $3 --csv \
     .device/rustile-bench --ops attention --attn $1 --no-torch --reps 3 --json /tmp/ncu.json 2>/dev/null \
   | python3 -c '
import csv,sys
rows=[r for r in csv.reader(sys.stdin) if len(r)>14]
h=rows[0]; k=h.index("Kernel Name"); m=h.index("Metric Name"); v=h.index("Metric Value")
for r in rows[1:]: print(r[k][:90], r[v])'
}
{
for shape in 64x256x256x16x16x72 4x4096x4096x16x16x72; do
  echo "==> ncu backward $shape"; ncu_k $shape attention_bwd 6 X=1
  echo "==> ncu forward $shape default"; ncu_k $shape attention_fwd 4 X=1
  echo "==> ncu forward $shape BM256"; ncu_k $shape attention_fwd 4 RUSTILE_ATTENTION_CONFIG=BM256
done
} 2>&1 | tee "$OUT/ncu.txt"
echo "==> bench BM256 variant (no torch)"
RUSTILE_ATTENTION_CONFIG=BM256 timeout 100 .device/rustile-bench --ops attention --attn 64x256x256x16x16x72,4x4096x4096x16x16x72,16x1024x1024x16x16x72 --no-torch --reps 30 2>&1 | grep -v "^ *$" | tee "$OUT/bench-bm256.txt" | grep -E "µs|rustile"
TESTS=0 BENCH=1 bash bench/device_run.sh --ops attention --attn 64x256x256x16x16x72,4x4096x4096x16x16x72,16x1024x1024x16x16x72,4x4096x4096x16x16x72c,4x4096x4096x16x16x128 --reps 30 > "$OUT/bench.txt" 2>&1
echo "exit $?" >> "$OUT/bench.txt"
grep -E "rustile|exit|backward" "$OUT/bench.txt"
