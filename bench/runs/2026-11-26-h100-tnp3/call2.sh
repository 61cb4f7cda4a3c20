#!/usr/bin/env bash
# Call 2: the small step's per-kernel profile; our attention alone at the mid
# and large shapes beside SDPA (all M+N queries over the M context keys); the
# GEMM sweep at the first MLP GEMM's shapes; the mid step.
set -u
OUT=${OUT:-out}
tar -C .device -xJf .device/bins.txz
.device/transformer-np --shape small --steps 10 --every 5 --profile --graphs > "$OUT/small-profile.txt" 2>&1
TESTS=0 bash bench/device_run.sh --ops gemm --mnk 16384x1368x512,36096x1368x512,200000x1368x512 --sweep --no-torch > "$OUT/gemm-sweep.txt" 2>&1; echo "sweep exit $?" >> "$OUT/gemm-sweep.txt"
TESTS=0 bash bench/device_run.sh --ops attention --attn 4x11000x10000x8x8x64,1x205000x200000x8x8x64 --reps 10 > "$OUT/attention.txt" 2>&1; echo "attention exit $?" >> "$OUT/attention.txt"
PARTS=ours SHAPES=mid STEPS=10 bash bench/device_train.sh > "$OUT/train-mid.txt" 2>&1; echo "train exit $?" >> "$OUT/train-mid.txt"
mkdir -p "$OUT/keep" && mv "$OUT"/train-logs.tgz "$OUT"/results.jsonl "$OUT/keep/" 2>/dev/null
tar -C "$OUT" -czf "$OUT/call2-logs.tgz" keep && rm -rf "$OUT/keep" "$OUT/logs"
sed -n '/profile/,$p' "$OUT/small-profile.txt" | head -30; grep -E "rustile +[0-9]|cfg=|cublas " "$OUT/gemm-sweep.txt" | head -60; tail -25 "$OUT/attention.txt"; grep -E "^(summary|profile|==)" "$OUT/train-mid.txt"
