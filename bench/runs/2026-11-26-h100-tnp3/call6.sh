#!/usr/bin/env bash
# Call 6: PyTorch on both SDPA backends (flash and cuDNN) beside ours, small and mid.
set -u
OUT=${OUT:-out}
PARTS=ours,torch SHAPES="small mid" bash bench/device_train.sh > "$OUT/train.txt" 2>&1; echo "train exit $?" >> "$OUT/train.txt"
grep -E "^\{|summary|profile|==" "$OUT/train.txt"
