#!/bin/bash
# QuasarAttention layer: GPU tests (4096 and 65,536 tokens against float64), memcheck at 4096, then the bench beside torch+FLA
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $OUT/pip.log 2>&1
Q=$(ls .device/quasar-* | head -1)
timeout 200 $Q --test-threads=1 --nocapture > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --exact seed_layer_on_the_gpu_at_4096_tokens --test-threads=1 > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
timeout ${BENCH_TIMEOUT:-240} .device/rustile-bench --ops quasar --tokens ${TOKENS:-4096,16384,65536,100000,500000,1000000} --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "out cos|dbeta|panicked|test result|rc=" $OUT/test.log | sed 's/(seed [0-9]*)//' | cut -c1-200; grep -c "rel L2" $OUT/test.log; tail -3 $OUT/memcheck.log; grep -v "^\s*$" $OUT/bench.log | tail -30
