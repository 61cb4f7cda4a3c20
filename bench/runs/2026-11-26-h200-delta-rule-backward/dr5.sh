#!/bin/bash
# delta rule: bench against FLA (forward, forward+backward)
OUT=${OUT:-out}; mkdir -p $OUT
[ -x .device/rustile-bench ] || tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $OUT/pip.log 2>&1
python3 -c "import fla, einops; print('fla', fla.__version__)" >> $OUT/pip.log 2>&1
timeout ${BENCH_TIMEOUT:-540} .device/rustile-bench --ops delta_rule --tokens ${TOKENS:-4096,16384,65536,100000,500000,1000000} ${SWEEP:-} --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
tail -2 $OUT/pip.log; grep -v "^\s*$" $OUT/bench.log | tail -60
