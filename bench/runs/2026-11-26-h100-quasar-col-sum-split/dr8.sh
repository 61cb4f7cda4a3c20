#!/bin/bash
# On the H100: the layer's GPU tests and memcheck, col_sum's other users (gpu_train), then the layer's bench with its per-kernel profile beside torch+FLA
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $OUT/pip.log 2>&1
Q=$(ls .device/quasar-* | head -1); GT=$(ls .device/gpu_train-* | head -1)
timeout 200 $Q --test-threads=1 --nocapture > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
timeout 100 $GT --test-threads=1 > $OUT/test-train.log 2>&1; echo "tests rc=$?" >> $OUT/test-train.log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --exact seed_layer_on_the_gpu_at_4096_tokens --test-threads=1 > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
timeout ${BENCH_TIMEOUT:-240} .device/rustile-bench --ops quasar --tokens ${TOKENS:-4096,16384,65536,100000,500000,1000000} --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
for c in WARPS8 BC64; do
  RUSTILE_QUASAR_CONFIG=$c timeout 150 .device/rustile-bench --ops quasar --no-torch --tokens 4096,1000000 --json $OUT/bench-$c.json > $OUT/bench-$c.log 2>&1; echo "bench rc=$?" >> $OUT/bench-$c.log
done
grep -E "out cos|panicked|test result|rc=" $OUT/test.log | sed 's/(seed [0-9]*)//' | cut -c1-200; grep -E "test result|panicked|rc=" $OUT/test-train.log; tail -3 $OUT/memcheck.log; grep -E "quasar T|by kernel|rc=" $OUT/bench.log | cut -c1-600; grep -E "^quasar" $OUT/bench.log | tail -12
for c in WARPS8 BC64; do echo "== $c"; grep -E "by kernel|rc=" $OUT/bench-$c.log | cut -c1-600; grep -E "^quasar" $OUT/bench-$c.log | tail -4; done
