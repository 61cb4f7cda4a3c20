#!/usr/bin/env bash
# Session 25 run 5: the vision shape three times beside SDPA (the committed tree), for the spread.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
for i in 1 2 3; do
  TESTS=0 BENCH=1 bash bench/device_run.sh --ops attention --attn 64x256x256x16x16x72 --reps 100 > "$OUT/bench-$i.txt" 2>&1
  cp "$OUT/results.json" "$OUT/bench-$i.json"
  grep -E "^attn" "$OUT/bench-$i.txt" | grep -E "rustile|sdpa cudnn|sdpa  " | grep -v peak
done
