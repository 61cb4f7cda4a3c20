#!/bin/bash
# On the H100: QuasarAttention's convolution as a walk down rows (forward; the
# backward's first half) and the attention dK/dV program with its statistics
# staged by the copy warpgroup. Tests, memcheck, the layer's bench beside
# torch+FLA, the attention bench beside SDPA, then the Python package with every
# capture case in its own process. Logs bundled into logs.tgz.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $L/pip.log 2>&1
Q=$(ls .device/quasar-* | head -1); G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 200 $Q --test-threads=1 --nocapture > $L/test-quasar.log 2>&1; echo "quasar tests rc=$?" >> $L/test-quasar.log
grep -E "out cos|panicked|test result|rc=" $L/test-quasar.log | sed 's/(seed [0-9]*)//' | cut -c1-200
timeout 250 $G --include-ignored --test-threads=1 attention > $L/test-attn.log 2>&1; echo "attention tests rc=$?" >> $L/test-attn.log
grep -E "^test |panicked|test result|rc=" $L/test-attn.log | cut -c1-200
timeout 150 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz-attn.log 2>&1; echo "fuzz rc=$?" >> $L/fuzz-attn.log
grep -E "^test |test result|rc=" $L/fuzz-attn.log | tail -3
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --exact seed_layer_on_the_gpu_at_4096_tokens --test-threads=1 > $L/memcheck-quasar.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-quasar.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck-attn.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-attn.log
tail -2 $L/memcheck-quasar.log $L/memcheck-attn.log
timeout 240 .device/rustile-bench --ops quasar --tokens 4096,16384,65536,100000,500000,1000000 --json $OUT/bench-quasar.json > $L/bench-quasar.log 2>&1; echo "bench rc=$?" >> $L/bench-quasar.log
grep -E "by kernel|rc=" $L/bench-quasar.log | cut -c1-700; grep -E "^quasar" $L/bench-quasar.log | tail -12
RUSTILE_QUASAR_CONFIG=BC512 timeout 120 .device/rustile-bench --ops quasar --no-torch --tokens 4096,1000000 > $L/bench-quasar-BC512.log 2>&1; echo "bench rc=$?" >> $L/bench-quasar-BC512.log
grep -E "by kernel|rc=" $L/bench-quasar-BC512.log | cut -c1-700; grep -E "^quasar" $L/bench-quasar-BC512.log | tail -4
A=4x4096x4096x32x32x64,1x11000x10000x8x8x64,1x16384x16384x32x32x64
timeout 200 .device/rustile-bench --ops attention --attn $A --json $OUT/bench-attn.json > $L/bench-attn.log 2>&1; echo "bench rc=$?" >> $L/bench-attn.log
grep -E "^attn|rc=" $L/bench-attn.log | cut -c1-220
RUSTILE_ATTENTION_CONFIG=LATE0_COPIER0 timeout 150 .device/rustile-bench --ops attention --attn $A --no-torch > $L/bench-attn-copier0.log 2>&1; echo "bench rc=$?" >> $L/bench-attn-copier0.log
grep -E "^attn_bwd|rc=" $L/bench-attn-copier0.log | cut -c1-220
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
