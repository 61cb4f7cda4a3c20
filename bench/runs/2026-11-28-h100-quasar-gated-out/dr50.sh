#!/bin/bash
# On the H100: gated_out_proj's GPU test and memcheck, the layer's GPU tests (infer too),
# then the layer alone (no torch) fused against unfused in alternating rounds (ROUNDS), each
# gated_out_proj config forced (CONFIGS), and with TORCH=1 the layer beside torch+FLA.
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
B() { timeout 150 .device/rustile-bench --ops quasar --no-torch --tokens ${TOKENS:-4096,65536,1000000} > $L/bench-$1.log 2>&1; echo "bench rc=$?" >> $L/bench-$1.log; }
for round in ${ROUNDS-1 2}; do
  B fused-$round
  RUSTILE_QUASAR_UNFUSED=1 B unfused-$round
done
for c in ${CONFIGS-SMEM180224 SMEM156160}; do RUSTILE_QUASAR_CONFIG=$c B $c; done
if [ -n "${TORCH:-}" ]; then
  python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $L/pip.log 2>&1
  timeout 240 .device/rustile-bench --ops quasar --tokens 4096,16384,65536,100000,500000,1000000 --json $L/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
fi
grep -E "test result|panicked|rc=|SKIPPED" $L/test-ops.log | cut -c1-250; grep -E "out cos|test result|panicked|rc=|SKIPPED" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200
tail -2 $L/memcheck-ops.log; tail -2 $L/memcheck-layer.log
for f in $L/bench-*.log; do echo "== $(basename $f)"; grep -E "quasar T|forward by kernel|rc=" $f | cut -c1-460; done
[ -f $L/bench.log ] && grep -E "quasar|rc=" $L/bench.log | cut -c1-300
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
