#!/bin/bash
# On the H100: the convolution's backward in one-warp programs (no barrier in its column sums) against the
# previous default (RUSTILE_QUASAR_CONFIG=BT32_BC128_WARPS4), alternating; the layer's GPU tests and memcheck first.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
Q=$(ls .device/quasar-* | head -1)
timeout 200 $Q --include-ignored --test-threads=1 --nocapture > $L/test-layer.log 2>&1; echo "rc=$?" >> $L/test-layer.log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --exact seed_layer_on_the_gpu_at_4096_tokens --include-ignored --test-threads=1 > $L/memcheck-layer.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-layer.log
B() { timeout 120 .device/rustile-bench --ops quasar --no-torch --tokens ${TOKENS:-4096,65536,1000000} > $L/bench-$1.log 2>&1; echo "bench rc=$?" >> $L/bench-$1.log; }
for round in 1 2; do
  B warp1-$round
  RUSTILE_QUASAR_CONFIG=BT32_BC128_WARPS4 B before-$round
done
grep -E "out cos|test result|panicked|rc=|SKIPPED" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200; tail -2 $L/memcheck-layer.log
for f in $L/bench-*.log; do echo "== $(basename $f)"; grep -E "quasar T|rc=" $f | cut -c1-200; grep -E "backward by kernel" $f | grep -oE "conv_silu_bwd×3 [0-9.]*"; done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
