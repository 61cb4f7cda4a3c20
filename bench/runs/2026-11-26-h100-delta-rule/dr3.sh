#!/bin/bash
# delta rule: GPU tests, memcheck, bench against FLA
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
python3 -c "import einops" 2>/dev/null || echo "einops missing" >> $OUT/pip.log
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl >> $OUT/pip.log 2>&1
python3 -c "import fla, einops; print('fla', fla.__version__)" >> $OUT/pip.log 2>&1
G=$(ls .device/gpu_ops-* | head -1)
timeout 240 $G --include-ignored --test-threads=1 --nocapture delta_rule > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
if [ "${MEMCHECK:-1}" = 1 ]; then
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 86 $G --exact delta_rule_matches_float64 --include-ignored --test-threads=1 > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
fi
timeout ${BENCH_TIMEOUT:-400} .device/rustile-bench --ops delta_rule --tokens ${TOKENS:-4096,16384,65536,100000,500000,1000000} ${SWEEP:---sweep} --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
tail -5 $OUT/test.log; tail -3 $OUT/memcheck.log 2>/dev/null; cat $OUT/pip.log | tail -3; cat $OUT/bench.log | tail -40
