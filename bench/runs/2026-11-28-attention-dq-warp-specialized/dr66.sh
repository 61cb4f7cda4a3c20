#!/bin/bash
# On the GPU: the attention bench at issue 35's D = 64 and 128 shapes, the
# TransformerNP slicing and the vision shape, with the warp-specialized dQ
# program (the default), beside SDPA's backends in the same run (no JSON: an
# H200 run beside the headline's H100 rows would mislead).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
[ -d .device/pack ] || tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
A=""
for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x32x32x64,${b}x${s}x${s}x32x32x64c,${b}x${s}x${s}x16x16x128,${b}x${s}x${s}x16x16x128c"; done
A="${A#,},1x11000x10000x8x8x64,64x256x256x16x16x72"
timeout 500 .device/rustile-bench --ops attention --attn $A --json /tmp/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
grep -E "^attn\S* .* (rustile|sdpa)|rc=" $L/bench.log | cut -c1-130
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
