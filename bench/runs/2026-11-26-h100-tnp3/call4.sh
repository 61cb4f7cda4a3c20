#!/usr/bin/env bash
# Call 4 (31f442c, the re-tuned table compiled in): the MLP bench and the
# first MLP GEMM plain beside it; the small step, ours and PyTorch's; memcheck
# of the GEMM/MLP GPU tests and the training tests.
set -u
OUT=${OUT:-out}
TESTS=0 bash bench/device_run.sh --ops mlp,gemm --mnk 16384x1368x512,200000x1368x512 --no-torch > "$OUT/mlp-gemm.txt" 2>&1; echo "bench exit $?" >> "$OUT/mlp-gemm.txt"
PARTS=ours,torch SHAPES=small bash bench/device_train.sh > "$OUT/train-small.txt" 2>&1; echo "train exit $?" >> "$OUT/train-small.txt"
mv "$OUT/train-logs.tgz" "$OUT/train-small-logs.tgz"
SANITIZE=memcheck SANITIZE_JOBS=4 SANITIZE_TESTS='gemm|mlp' bash bench/device_run.sh > "$OUT/memcheck-gemm.txt" 2>&1; echo "memcheck exit $?" >> "$OUT/memcheck-gemm.txt"
PARTS=sanitize SANITIZE_TOOLS=memcheck bash bench/device_train.sh > "$OUT/memcheck-train.txt" 2>&1; echo "memcheck train exit $?" >> "$OUT/memcheck-train.txt"
rm -f "$OUT/train-logs.tgz"
grep -E "^(mlp|gemm) " "$OUT/mlp-gemm.txt"; grep -E "^\{|summary|profile" "$OUT/train-small.txt"; cat "$OUT"/sanitize-memcheck.txt "$OUT/sanitize.txt"; tail -3 "$OUT/memcheck-gemm.txt"
