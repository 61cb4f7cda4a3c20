#!/bin/bash
# On the H100: the attention bench beside SDPA's backends at issue 35's shapes
# (D 64 and 128, S = 1k, 4k and 16k of 16k tokens, causal and not), the vision
# shape and the TransformerNP's mid slicing, with the warp-specialized dK/dV
# program at D = 64 and 128 (LATE0_COPIER1 names only those dK/dV configs: the
# forward keeps its tuned table, D = 72 its default); the bench's float64
# check of each shape first. Logs in logs.tgz.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT) RUSTILE_ATTENTION_CONFIG=LATE0_COPIER1
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
A=""
for d in 64 128; do h=$((2048 / d)); for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x${h}x${h}x${d},${b}x${s}x${s}x${h}x${h}x${d}c"; done; done
A="${A#,},64x256x256x16x16x72,1x11000x10000x8x8x64"
timeout 560 .device/rustile-bench --ops attention --attn $A --json $L/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
grep -E "^attn.*(rustile|sdpa|best)|rc=|rel err" $L/bench.log | cut -c1-130
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
