#!/bin/bash
# On the H100: the tree whose shared-tile period check folds away (every
# wgmma/TMA kernel rebuilt), against the previous binaries (.device/bins-prev.txz,
# 36e1f63) in the same run: every GPU op test, the attention fuzz, memcheck of
# the attention backward, then the attention backward and GEMMs, now and before.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/prev && tar -C .device/prev -xJf .device/bins-prev.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1); H=$(ls .device/gpu-* | head -1)
timeout 330 $G --include-ignored --test-threads=1 > $L/tests.log 2>&1; echo "gpu_ops rc=$?" >> $L/tests.log
grep -E "^test .*(ok|FAILED)|test result|rc=" $L/tests.log | tail -30
timeout 60 $H --include-ignored --test-threads=1 > $L/host.log 2>&1; echo "gpu host rc=$?" >> $L/host.log
grep -E "test result|rc=" $L/host.log
timeout 120 $F --include-ignored --test-threads=1 attention > $L/fuzz.log 2>&1; echo "fuzz rc=$?" >> $L/fuzz.log
grep -E "test result|rc=" $L/fuzz.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck.log
A=4x4096x4096x32x32x64,4x4096x4096x32x32x64c,1x11000x10000x8x8x64,1x16384x16384x32x32x64,16x1024x1024x32x32x64,4x4096x4096x16x16x128,64x256x256x16x16x72
M=4096x4096x4096,8192x8192x8192,4096x14336x4096
for i in 1 2; do
  for b in now prev; do
    B=.device/rustile-bench; C=$(cat .device/COMMIT); [ $b = prev ] && B=.device/prev/rustile-bench && C=36e1f63
    RUSTILE_COMMIT=$C timeout 150 $B --ops attention --attn $A --no-torch --json $L/attn-$b-$i.json > $L/attn-$b-$i.log 2>&1; echo "bench rc=$?" >> $L/attn-$b-$i.log
    echo "== $b $i"; grep -E "^attn\S* .* rustile |rc=|rel err" $L/attn-$b-$i.log | cut -c1-110
    [ $i = 1 ] && { RUSTILE_COMMIT=$C timeout 120 $B --ops gemm,gemm_fp8,dual_gemm --mnk $M --no-torch --json $L/gemm-$b.json > $L/gemm-$b.log 2>&1; echo "bench rc=$?" >> $L/gemm-$b.log; grep -E "^(gemm|dual)\S* .*(rustile|cublas)|rc=|mismatch|error" $L/gemm-$b.log | cut -c1-110; }
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
