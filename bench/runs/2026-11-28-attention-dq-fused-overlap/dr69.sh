#!/bin/bash
# On the GPU: the warp-specialized dK/dV program with its multiplying
# warpgroups taking turns at issuing each step's score products (`TURNS = 1`)
# against the default, at D = 64 and 128; `DQ = 1` with dSᵀ through shared
# memory (this tree) against its first form (9147103+dirty's binaries); the
# causal shapes with and without the heaviest query blocks first (this
# tree, its tuned table re-stamped, against 9147103+dirty), three rounds. Each in its own process, alternating (no torch).
# First the backward's GPU tests with `TURNS = 1` forced.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p /tmp/old && tar -C /tmp/old -xJf .device/old-9147103d.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
RUSTILE_ATTENTION_CONFIG=TURNS1 timeout 100 $G --include-ignored --test-threads=1 attention_backward > $L/tests-turns.log 2>&1; echo "rc=$?" >> $L/tests-turns.log
RUSTILE_ATTENTION_CONFIG=TURNS1 timeout 100 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz-turns.log 2>&1; echo "rc=$?" >> $L/fuzz-turns.log
for f in tests-turns fuzz-turns; do echo "== $f"; grep -E "test result|rc=|panicked" $L/$f.log | cut -c1-200 | head -5; done
A64="16x1024x1024x32x32x64,16x1024x1024x32x32x64c,4x4096x4096x32x32x64,4x4096x4096x32x32x64c,1x16384x16384x32x32x64,1x16384x16384x32x32x64c,1x11000x10000x8x8x64"
A128="16x1024x1024x16x16x128,16x1024x1024x16x16x128c,4x4096x4096x16x16x128,4x4096x4096x16x16x128c,1x16384x16384x16x16x128,1x16384x16384x16x16x128c"
AC="16x1024x1024x32x32x64c,4x4096x4096x32x32x64c,1x16384x16384x32x32x64c,16x1024x1024x16x16x128c,4x4096x4096x16x16x128c,1x16384x16384x16x16x128c"
# name → binary folder, RUSTILE_ATTENTION_CONFIG, shapes
declare -A B=([new]=.device [turns]=.device [new128]=.device [turns128]=.device [dq]=.device [olddq]=/tmp/old [fwd]=.device [oldfwd]=/tmp/old)
declare -A C=([new]="" [turns]="TURNS1" [new128]="" [turns128]="TURNS1" [dq]="_DQ1_" [olddq]="_DQ1_" [fwd]="" [oldfwd]="")
declare -A S=([new]=$A64 [turns]=$A64 [new128]=$A128 [turns128]=$A128 [dq]=$A64 [olddq]=$A64 [fwd]=$AC [oldfwd]=$AC)
run() {
    local v=$1 r=$2
    RUSTILE_ATTENTION_CONFIG=${C[$v]} timeout 150 ${B[$v]}/rustile-bench --ops attention --no-torch --attn ${S[$v]} --json /tmp/bench.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; awk '/^attn[a-z_]* [0-9]+x/ {s=$2} /^  [0-9.]+ µs/ {print s, "fwd", $1} /^  backward/ {print s, $2} /rc=/' $L/bench-$v-$r.log | paste -sd' '
}
for r in 1 2; do for v in new turns new128 turns128 olddq dq; do run $v $r; done; done
for r in 1 2 3; do for v in oldfwd fwd; do run $v $r; done; done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
