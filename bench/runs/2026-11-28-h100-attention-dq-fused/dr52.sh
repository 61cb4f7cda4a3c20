#!/bin/bash
# On the H100: the dK/dV program that makes dQ too (`DQ = 1`, chosen by
# RUSTILE_ATTENTION_CONFIG=_DQ1_) beside the default (two programs), at
# D = 64: the attention GPU tests, fuzz and memcheck of the backward with
# it, then the attention bench of both beside SDPA's backends, each in its
# own process, alternating (ROUNDS, default 2).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1)
if [ -z "${NOTEST:-}" ]; then
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 200 $G --include-ignored --test-threads=1 attention_backward > $L/tests-dq.log 2>&1; echo "rc=$?" >> $L/tests-dq.log
grep -E "test result|rc=|panicked|rel err" $L/tests-dq.log | head
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 100 $F --include-ignored --test-threads=1 attention_backward > $L/fuzz-dq.log 2>&1; echo "rc=$?" >> $L/fuzz-dq.log
grep -E "test result|rc=|panicked" $L/fuzz-dq.log | head -5
timeout 120 $G --include-ignored --test-threads=1 attention > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
grep -E "test result|rc=" $L/tests.log
RUSTILE_ATTENTION_CONFIG=_DQ1_ timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --exact attention_backward_matches_float64 --test-threads=1 > $L/memcheck-dq.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-dq.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck-dq.log
fi
A=""
for s in 1024 4096 16384; do b=$((16384 / s)); A="$A,${b}x${s}x${s}x32x32x64,${b}x${s}x${s}x32x32x64c"; done
A="${A#,},1x11000x10000x8x8x64"
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in base dq; do
    if [ $v = dq ]; then export RUSTILE_ATTENTION_CONFIG=_DQ1_; else unset RUSTILE_ATTENTION_CONFIG; fi
    timeout 200 .device/rustile-bench --ops attention --attn $A --json $L/bench-$v-$r.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; grep -E "^attn\S* .* rustile |rc=" $L/bench-$v-$r.log | cut -c1-140
  done
done
unset RUSTILE_ATTENTION_CONFIG
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
