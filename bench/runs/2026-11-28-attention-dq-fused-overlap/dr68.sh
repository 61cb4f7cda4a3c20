#!/bin/bash
# On the GPU: dQ inside the dK/dV program with dSᵀ through shared memory to
# both its products (`DQ = 1`: dV's product runs while dSᵀ is made, dK's
# while the dQ block goes to the copy engine) against the two programs (the
# default); and causal grids that launch their heaviest query blocks first,
# against the binaries before (9147103+dirty: same kernels otherwise). Each
# in its own process, alternating (ROUNDS, default 2; no torch). First the
# attention GPU tests with the default and with `DQ = 1`, then memcheck.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p /tmp/old && tar -C /tmp/old -xJf .device/old-9147103d.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
timeout 150 $G --include-ignored --test-threads=1 attention > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 100 $G --include-ignored --test-threads=1 attention_backward > $L/tests-dq.log 2>&1; echo "rc=$?" >> $L/tests-dq.log
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 100 $F --include-ignored --test-threads=1 attention > $L/fuzz-dq.log 2>&1; echo "rc=$?" >> $L/fuzz-dq.log
for f in tests tests-dq fuzz-dq; do echo "== $f"; grep -E "test result|rc=|panicked" $L/$f.log | cut -c1-200 | head -5; done
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --exact attention_backward_matches_float64 --include-ignored --test-threads=1 > $L/memcheck-dq.log 2>&1; echo "rc=$?" >> $L/memcheck-dq.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --exact attention_matches_float64 --include-ignored --test-threads=1 > $L/memcheck-fwd.log 2>&1; echo "rc=$?" >> $L/memcheck-fwd.log
for f in memcheck-dq memcheck-fwd; do echo "== $f"; grep -E "ERROR SUMMARY|test result|rc=" $L/$f.log | head -3; done
A64="16x1024x1024x32x32x64,16x1024x1024x32x32x64c,4x4096x4096x32x32x64,4x4096x4096x32x32x64c,1x16384x16384x32x32x64,1x16384x16384x32x32x64c,1x11000x10000x8x8x64"
A128="16x1024x1024x16x16x128c,4x4096x4096x16x16x128c,1x16384x16384x16x16x128c"
# name → binary folder, RUSTILE_ATTENTION_CONFIG, shapes
declare -A B=([new]=.device [dq]=.device [old]=/tmp/old/ [new128]=.device [old128]=/tmp/old/)
declare -A C=([new]="" [dq]="_DQ1_" [old]="" [new128]="COPIER1_STAGES4" [old128]="COPIER1_STAGES4")
declare -A S=([new]=$A64 [dq]=$A64 [old]=$A64 [new128]=$A128 [old128]=$A128)
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in old new dq old128 new128; do
    RUSTILE_ATTENTION_CONFIG=${C[$v]} timeout 150 ${B[$v]}/rustile-bench --ops attention --no-torch --attn ${S[$v]} --json /tmp/bench.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; awk '/^attn[a-z_]* [0-9]+x/ {s=$2} /^  (forward|backward)/ {print s, $1, $2} /rc=/' $L/bench-$v-$r.log | paste -sd' '
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
