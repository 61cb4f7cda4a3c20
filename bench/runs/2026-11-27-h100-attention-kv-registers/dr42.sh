#!/bin/bash
# On the H100, the tree as committed (the period checks folded in the
# warp-specialized dK/dV program only, `wgmma::check_periods_once`; that
# program D = 128's default): the attention GPU tests, fuzz and memcheck of
# the backward, then the attention bench beside SDPA's backends at issue 35's
# shapes, the vision shape and the TransformerNP's mid slicing.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 200 $G --include-ignored --test-threads=1 attention > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
grep -E "test result|rc=" $L/tests.log
timeout 100 $F --include-ignored --test-threads=1 attention > $L/fuzz.log 2>&1; echo "rc=$?" >> $L/fuzz.log
grep -E "test result|rc=" $L/fuzz.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck.log
A=""
for d in 64 128; do h=$((2048 / d)); for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x${h}x${h}x${d},${b}x${s}x${s}x${h}x${h}x${d}c"; done; done
A="${A#,},64x256x256x16x16x72,1x11000x10000x8x8x64"
timeout 300 .device/rustile-bench --ops attention --attn $A --json $L/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
grep -E "^attn\S* .* rustile |rc=" $L/bench.log | cut -c1-130
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
