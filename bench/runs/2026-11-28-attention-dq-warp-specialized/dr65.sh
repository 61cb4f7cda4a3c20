#!/bin/bash
# On the GPU: the warp-specialized dQ program with three K/V stages (the
# default) against four and against the program without a copy warpgroup,
# at D = 64, 72 and 128, each in its own process, alternating (ROUNDS,
# default 2; no torch: dr66 is the baseline run). First the backward's GPU
# tests with four stages forced.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
# name → RUSTILE_ATTENTION_CONFIG (parts only dQ configs' names have)
declare -A V=([s3]="" [old]="TMA1_COPIER0" [s4]="COPIER1_STAGES4")
for v in s3 s4; do
    RUSTILE_ATTENTION_CONFIG=${V[$v]} timeout 100 $G --include-ignored --test-threads=1 attention_backward > $L/tests-$v.log 2>&1; echo "rc=$?" >> $L/tests-$v.log
    echo "== tests $v"; grep -E "test result|rc=|panicked" $L/tests-$v.log | cut -c1-200 | head -5
done
A=""
for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x32x32x64,${b}x${s}x${s}x32x32x64c,${b}x${s}x${s}x16x16x128,${b}x${s}x${s}x16x16x128c"; done
A="${A#,},1x11000x10000x8x8x64,64x256x256x16x16x72"
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in old s3 s4; do
    RUSTILE_ATTENTION_CONFIG=${V[$v]} timeout 200 .device/rustile-bench --ops attention --no-torch --attn $A --json /tmp/bench.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; awk '/^attn[a-z_]* [0-9]+x/ {s=$2} /^  backward/ {print s, $2} /rc=/' $L/bench-$v-$r.log | paste -sd' '
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
