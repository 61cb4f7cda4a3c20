#!/bin/bash
# On the GPU (dr69's binaries; the forward and the default backward are the
# committed code): the causal D = 64 and 128 shapes of issue 35 beside
# SDPA's backends in the same run, now that causal grids launch their
# heaviest query blocks first (no JSON: H200 rows beside the headline's H100
# rows would mislead).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
A="16x1024x1024x32x32x64c,4x4096x4096x32x32x64c,1x16384x16384x32x32x64c,16x1024x1024x16x16x128c,4x4096x4096x16x16x128c,1x16384x16384x16x16x128c"
timeout 400 .device/rustile-bench --ops attention --attn $A --json /tmp/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
grep -E "^attn\S* .* (rustile|sdpa)|rc=" $L/bench.log | cut -c1-130
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
