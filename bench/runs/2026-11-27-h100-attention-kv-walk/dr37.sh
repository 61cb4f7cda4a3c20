#!/bin/bash
# On the H100: the warp-specialized dK/dV program whose loop steps its walk
# instead of dividing, against the previous binaries (.device/bins-prev.txz,
# d902c8e) in the same run, twice each, after its tests, fuzz and memcheck.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/prev && tar -C .device/prev -xJf .device/bins-prev.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 200 $G --include-ignored --test-threads=1 attention_backward > $L/tests.log 2>&1; echo "attention tests rc=$?" >> $L/tests.log
grep -E "test result|rc=" $L/tests.log
timeout 120 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz.log 2>&1; echo "fuzz rc=$?" >> $L/fuzz.log
grep -E "test result|rc=" $L/fuzz.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck.log
A=4x4096x4096x32x32x64,4x4096x4096x32x32x64c,1x11000x10000x8x8x64,1x16384x16384x32x32x64,16x1024x1024x32x32x64
for i in 1 2; do
  for b in now prev; do
    B=.device/rustile-bench; C=$(cat .device/COMMIT); [ $b = prev ] && B=.device/prev/rustile-bench && C=d902c8e
    RUSTILE_COMMIT=$C timeout 150 $B --ops attention --attn $A --no-torch > $L/bench-$b-$i.log 2>&1; echo "bench rc=$?" >> $L/bench-$b-$i.log
    echo "== $b $i"; grep -E "^attn_.*bwd|rc=" $L/bench-$b-$i.log | cut -c1-120
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
