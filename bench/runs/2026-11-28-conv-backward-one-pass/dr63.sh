#!/bin/bash
# On the GPU: the kept state (the one-pass convolution backward, blocks of 128
# rows down to 16 chosen by the token count, the delta rule back at 28a4c30's).
# The convolution's GPU test and the layer's, memcheck of the convolution's
# test, the layer against 28a4c30's binaries (.device/old-*.txz), then the
# layer beside torch+FLA (no JSON: an H200 run).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf $(ls .device/old-*.txz | head -1)
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
OPS=$(ls .device/gpu_ops-* | head -1); Q=$(ls .device/quasar-* | head -1)
timeout 120 $OPS conv_silu --include-ignored --test-threads=1 --nocapture > $L/test-ops.log 2>&1; echo "rc=$?" >> $L/test-ops.log
timeout 200 $Q --include-ignored --test-threads=1 --nocapture > $L/test-layer.log 2>&1; echo "rc=$?" >> $L/test-layer.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $OPS conv_silu --include-ignored --test-threads=1 > $L/memcheck-ops.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-ops.log
grep -E "test |test result|panicked|rc=|SKIPPED|refused" $L/test-ops.log | cut -c1-250 | tail -20; grep -E "out cos|test result|panicked|rc=|SKIPPED|refused" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200
grep -E "ERROR SUMMARY|rc=" $L/memcheck-ops.log
for which in old new; do
    B=.device/rustile-bench; [ $which = old ] && B=.device/old/rustile-bench
    timeout 150 $B --ops quasar --no-torch --tokens 4096,65536,1000000 > $L/layer-$which.log 2>&1; echo "bench rc=$?" >> $L/layer-$which.log
    echo "== layer $which"; grep -E "quasar T|backward by kernel|rc=" $L/layer-$which.log | cut -c1-330
done
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $L/pip.log 2>&1
timeout 300 .device/rustile-bench --ops quasar --tokens 4096,65536,1000000 > $L/bench-fla.log 2>&1; echo "bench rc=$?" >> $L/bench-fla.log
echo "== beside torch+FLA"; grep -vE "^\s*$" $L/bench-fla.log | grep -E "fla|forward|quasar|torch|rc=" | grep -v "by kernel" | cut -c1-300 | tail -30
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
