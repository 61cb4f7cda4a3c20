#!/bin/bash
# On the H100: the delta rule's forward and forward+backward beside FLA, the layer with its per-kernel breakdown beside torch+FLA, the backward's GPU test again
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $OUT/pip.log 2>&1
G=$(ls .device/gpu_ops-* | head -1)
timeout 100 $G --include-ignored --test-threads=1 --nocapture delta_rule_backward > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
T=${TOKENS:-4096,16384,65536,100000,500000,1000000}
timeout 260 .device/rustile-bench --ops delta_rule --tokens $T --json $OUT/bench-delta.json > $OUT/bench-delta.log 2>&1; echo "bench rc=$?" >> $OUT/bench-delta.log
timeout 200 .device/rustile-bench --ops quasar --tokens $T --json $OUT/bench-quasar.json > $OUT/bench-quasar.log 2>&1; echo "bench rc=$?" >> $OUT/bench-quasar.log
grep -E "test result|rc=" $OUT/test.log; grep -E "fwd_bwd|forward\+backward|chunked|rc=" $OUT/bench-delta.log | cut -c1-260 | tail -22; grep -E "quasar T|by kernel|rc=" $OUT/bench-quasar.log | cut -c1-400; grep -E "^quasar" $OUT/bench-quasar.log | tail -12
