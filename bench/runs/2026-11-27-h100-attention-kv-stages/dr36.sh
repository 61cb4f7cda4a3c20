#!/bin/bash
# On the H100: the warp-specialized dK/dV program (D = 64) with four Q/dO stages
# (QD = 4, the default now) against two (QD = 2) and SDPA in the same run, after
# its tests, fuzz and memcheck. Logs in logs.tgz.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 200 $G --include-ignored --test-threads=1 attention_backward > $L/tests.log 2>&1; echo "attention tests rc=$?" >> $L/tests.log
grep -E "^test |test result|rc=" $L/tests.log | cut -c1-160
timeout 120 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz.log 2>&1; echo "fuzz rc=$?" >> $L/fuzz.log
grep -E "test result|rc=" $L/fuzz.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck.log
A=4x4096x4096x32x32x64,4x4096x4096x32x32x64c,1x11000x10000x8x8x64,1x16384x16384x32x32x64,16x1024x1024x32x32x64
timeout 200 .device/rustile-bench --ops attention --attn $A --json $L/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
grep -E "^attn_.*bwd.*rustile|rc=" $L/bench.log | cut -c1-200
for c in QD2 LATE0_COPIER0; do
  RUSTILE_ATTENTION_CONFIG=$c timeout 150 .device/rustile-bench --ops attention --attn $A --no-torch > $L/bench-$c.log 2>&1; echo "bench rc=$?" >> $L/bench-$c.log
  echo "== $c"; grep -E "^attn_.*bwd|rc=" $L/bench-$c.log | cut -c1-200
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
