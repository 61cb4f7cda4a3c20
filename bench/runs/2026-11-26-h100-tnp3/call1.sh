#!/usr/bin/env bash
# Call 1 (issue 34, third matrix): the training tests, the small step, the MLP
# bench (the single-kernel question) with our GEMM's sweep at 8192³ and at a
# product 8 deep, the training tests under the sanitizers.
set -u
OUT=${OUT:-out}
tar -C .device -xJf .device/bins.txz
PARTS=tests,ours SHAPES=small bash bench/device_train.sh > "$OUT/train-small.txt" 2>&1; echo "train exit $?" >> "$OUT/train-small.txt"
mkdir -p "$OUT/train-small" && mv "$OUT/results.jsonl" "$OUT/train-logs.tgz" "$OUT/train-small/" 2>/dev/null
TESTS=0 bash bench/device_run.sh --ops mlp,gemm --mnk 8192x8192x8192,320000x1368x8 --sweep --no-torch > "$OUT/mlp-gemm.txt" 2>&1; echo "bench exit $?" >> "$OUT/mlp-gemm.txt"
PARTS=sanitize SANITIZE_TOOLS=memcheck,synccheck,racecheck bash bench/device_train.sh > "$OUT/sanitize-train.txt" 2>&1; echo "sanitize exit $?" >> "$OUT/sanitize-train.txt"
mv "$OUT/train-logs.tgz" "$OUT/sanitize-logs.tgz" 2>/dev/null
tail -5 "$OUT/train-small.txt"; grep -E "^(summary|profile)" -A0 "$OUT/train-small.txt"; tail -40 "$OUT/mlp-gemm.txt"; cat "$OUT/sanitize.txt"
