#!/bin/bash
# On the H100: the warp-specialized dK/dV program at D = 128 (COPIER = 1, picked
# by RUSTILE_ATTENTION_CONFIG=COPIER1): its GPU tests and memcheck, then the
# D = 128 backward with it and with the default, same binary, twice each; then
# the GEMMs of this tree against the previous binaries (.device/bins-prev.txz,
# 36e1f63), interleaved, twice each.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/prev && tar -C .device/prev -xJf .device/bins-prev.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
export RUSTILE_COMMIT=$(cat .device/COMMIT)
RUSTILE_ATTENTION_CONFIG=COPIER1 timeout 200 $G --include-ignored --test-threads=1 attention_backward > $L/tests-copier1.log 2>&1; echo "rc=$?" >> $L/tests-copier1.log
grep -E "test result|rc=" $L/tests-copier1.log
RUSTILE_ATTENTION_CONFIG=COPIER1 timeout 100 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz-copier1.log 2>&1; echo "rc=$?" >> $L/fuzz-copier1.log
grep -E "test result|rc=" $L/fuzz-copier1.log
RUSTILE_ATTENTION_CONFIG=COPIER1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck-copier1.log 2>&1; echo "rc=$?" >> $L/memcheck-copier1.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck-copier1.log
A=16x1024x1024x16x16x128,16x1024x1024x16x16x128c,4x4096x4096x16x16x128,4x4096x4096x16x16x128c
for i in 1 2; do
  for c in default COPIER1; do
    if [ $c = COPIER1 ]; then export RUSTILE_ATTENTION_CONFIG=COPIER1; else unset RUSTILE_ATTENTION_CONFIG; fi
    timeout 100 .device/rustile-bench --ops attention --attn $A --no-torch --json $L/d128-$c-$i.json > $L/d128-$c-$i.log 2>&1; echo "bench rc=$?" >> $L/d128-$c-$i.log
    echo "== $c $i"; grep -E "^attn\S*_bwd .* rustile |rc=|rel err" $L/d128-$c-$i.log | cut -c1-110
  done
done
unset RUSTILE_ATTENTION_CONFIG
M=4096x4096x4096,8192x8192x8192,4096x14336x4096
for i in 1 2; do
  for b in now prev; do
    B=.device/rustile-bench; C=$(cat .device/COMMIT); [ $b = prev ] && B=.device/prev/rustile-bench && C=36e1f63
    RUSTILE_COMMIT=$C timeout 100 $B --ops gemm,gemm_fp8 --mnk $M --no-torch --json $L/gemm-$b-$i.json > $L/gemm-$b-$i.log 2>&1; echo "bench rc=$?" >> $L/gemm-$b-$i.log
    echo "== gemm $b $i"; grep -E "rc=|mismatch|rror" $L/gemm-$b-$i.log
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
