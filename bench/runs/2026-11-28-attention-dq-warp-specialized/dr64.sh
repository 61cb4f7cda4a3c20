#!/bin/bash
# On the GPU: the warp-specialized dQ program (`COPIER = 1`, now the default at
# D = 64 and 128). Its GPU tests (every variant forced at D = 64: STAGES 2 and
# PING 0 too; the old program without a copy warpgroup), the fuzz and memcheck
# of the backward, then the backward at D = 64 and 128 for each dQ program,
# each in its own process, alternating (no torch: the baseline run is dr65).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
# name → RUSTILE_ATTENTION_CONFIG (parts only dQ configs' names have)
declare -A V=([new]="" [old]="TMA1_COPIER0" [s2]="COPIER1_STAGES2" [p0]="COPIER1_STAGES3_PING0")
if [ -z "${NOTEST:-}" ]; then
timeout 150 $G --include-ignored --test-threads=1 attention > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
echo "== tests (default)"; grep -E "^test |test result|rc=|panicked" $L/tests.log | cut -c1-200 | tail -12
for v in s2 p0 old; do
    RUSTILE_ATTENTION_CONFIG=${V[$v]} timeout 100 $G --include-ignored --test-threads=1 attention_backward > $L/tests-$v.log 2>&1; echo "rc=$?" >> $L/tests-$v.log
    echo "== tests $v"; grep -E "test result|rc=|panicked" $L/tests-$v.log | cut -c1-200 | head -5
done
timeout 100 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz.log 2>&1; echo "rc=$?" >> $L/fuzz.log
echo "== fuzz"; grep -E "test result|rc=|panicked" $L/fuzz.log | head -5
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
echo "== memcheck"; grep -E "ERROR SUMMARY|rc=" $L/memcheck.log
fi
A=""
for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x32x32x64,${b}x${s}x${s}x32x32x64c,${b}x${s}x${s}x16x16x128,${b}x${s}x${s}x16x16x128c"; done
A="${A#,},1x11000x10000x8x8x64"
for r in $(seq 1 ${ROUNDS:-1}); do
  for v in ${VARIANTS:-old new s2 p0}; do
    RUSTILE_ATTENTION_CONFIG=${V[$v]} timeout 200 .device/rustile-bench --ops attention --no-torch --attn $A --json $L/bench-$v-$r.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; awk '/^attn[a-z_]* [0-9]+x/ {s=$2} /^  backward/ {print s, $2} /rc=/' $L/bench-$v-$r.log | paste -sd' ' 
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
