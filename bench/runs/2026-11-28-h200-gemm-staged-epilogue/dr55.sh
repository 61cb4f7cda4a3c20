#!/bin/bash
# On the GPU: the GEMM bench of these binaries beside the previous ones
# (.device/old-*.txz: mma.sync kernels writing 16-bit outputs from the
# registers), alternating, ROUNDS times; then every GEMM GPU test (and the
# SiLU-backward one) under compute-sanitizer's memcheck, with the GEMM
# family's --check (bench/device_run.sh's SANITIZE mode).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf .device/old-*.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in old new; do
    bin=.device/rustile-bench; [ $v = old ] && bin=.device/old/rustile-bench
    timeout 150 $bin --ops gemm --mnk 4096x4096x4096,16384x2048x512,2048x2048x2048,8192x8192x8192 > $L/bench-$v-$r.log 2>&1; echo "rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; grep -E "rustile mma.sync|rc=" $L/bench-$v-$r.log | cut -c1-110
  done
done
if [ -z "${NOSAN:-}" ]; then
OUT=$L/san SANITIZE=memcheck SANITIZE_TESTS='gemm|silu_grad|linear' bash bench/device_run.sh > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck.log
tail -4 $L/memcheck.log
fi
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
