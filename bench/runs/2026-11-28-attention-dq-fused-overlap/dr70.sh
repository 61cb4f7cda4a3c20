#!/bin/bash
# On the GPU (dr69's binaries): every attention GPU test and the attention
# fuzz with the defaults (causal grids heaviest first), and memcheck over
# the backward's float64 test with the default two programs.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 200 $G --include-ignored --test-threads=1 attention > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
timeout 100 $F --include-ignored --test-threads=1 attention > $L/fuzz.log 2>&1; echo "rc=$?" >> $L/fuzz.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --exact attention_backward_matches_float64 --include-ignored --test-threads=1 > $L/memcheck-bwd.log 2>&1; echo "rc=$?" >> $L/memcheck-bwd.log
for f in tests fuzz memcheck-bwd; do echo "== $f"; grep -E "ERROR SUMMARY|test result|rc=|panicked" $L/$f.log | cut -c1-200 | head -5; done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
