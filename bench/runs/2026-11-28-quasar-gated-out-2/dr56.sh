#!/bin/bash
# On the GPU: gated_out_proj with its gate biases copied with each stage and
# its output stored through shared memory. Its GPU test and the layer's (infer
# in three steps and fused), memcheck of both, then the layer alone (no torch)
# ROUNDS times: `infer` in three steps beside `infer` with `fused_out`.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
OPS=$(ls .device/gpu_ops-* | head -1); Q=$(ls .device/quasar-* | head -1)
timeout 120 $OPS gated_out_proj --include-ignored --test-threads=1 --nocapture > $L/test-ops.log 2>&1; echo "rc=$?" >> $L/test-ops.log
timeout 200 $Q --include-ignored --test-threads=1 --nocapture > $L/test-layer.log 2>&1; echo "rc=$?" >> $L/test-layer.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $OPS gated_out_proj --include-ignored --test-threads=1 > $L/memcheck-ops.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-ops.log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --exact seed_layer_on_the_gpu_at_4096_tokens --include-ignored --test-threads=1 > $L/memcheck-layer.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-layer.log
grep -E "test result|panicked|rc=|SKIPPED" $L/test-ops.log | cut -c1-250; grep -E "out cos|test result|panicked|rc=|SKIPPED" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200
grep -E "ERROR SUMMARY|rc=" $L/memcheck-ops.log $L/memcheck-layer.log
for round in ${ROUNDS-1 2}; do
  timeout 200 .device/rustile-bench --ops quasar --no-torch --tokens ${TOKENS:-4096,65536,1000000} > $L/bench-$round.log 2>&1; echo "bench rc=$?" >> $L/bench-$round.log
  echo "== round $round"; grep -E "quasar T|by kernel|rc=" $L/bench-$round.log | cut -c1-600
done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
