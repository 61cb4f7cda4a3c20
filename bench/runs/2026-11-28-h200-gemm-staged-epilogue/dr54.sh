#!/bin/bash
# On the GPU (an H200 in the recorded run): the mma.sync GEMMs with every epilogue staged (and three
# configs instead of four): their GPU tests (gpu_ops and gpu_fuzz GEMM tests,
# gpu_train), the GEMM family's --check against cuBLAS, gemm_nt re-tuned, the
# GEMM bench (mma.sync plain and fused beside the default and cuBLAS), and the
# TransformerNP step with its per-kernel profile beside the previous binaries
# (.device/old-*.txz, whose mma.sync kernels write 16-bit outputs element by
# element), alternating, ROUNDS times.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf .device/old-*.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1); T=$(ls .device/gpu_train-* | head -1)
if [ -z "${NOTEST:-}" ]; then
timeout 200 $G --include-ignored --test-threads=1 gemm > $L/tests-gemm.log 2>&1; echo "rc=$?" >> $L/tests-gemm.log
grep -E "test result|rc=|panicked" $L/tests-gemm.log | head
timeout 100 $F --include-ignored --test-threads=1 gemm > $L/fuzz-gemm.log 2>&1; echo "rc=$?" >> $L/fuzz-gemm.log
grep -E "test result|rc=|panicked" $L/fuzz-gemm.log | head -5
timeout 150 $T --include-ignored --test-threads=1 > $L/tests-train.log 2>&1; echo "rc=$?" >> $L/tests-train.log
grep -E "test result|rc=|panicked" $L/tests-train.log | head -5
timeout 120 .device/rustile-bench --check --ops gemm,dual_gemm,gemm_fp8 --mnk 777x1030x520,4096x4096x4096,16x4096x4096 > $L/check.log 2>&1; echo "rc=$?" >> $L/check.log
grep -E "WRONG|rc=" $L/check.log
fi
if [ -z "${NOTUNE:-}" ]; then
cp tuned/sm90.toml $OUT/sm90.toml
timeout 240 .device/rustile-tune --arch sm90 --op gemm_nt --out $OUT/sm90.toml > $L/tune.log 2>&1; echo "rc=$?" >> $L/tune.log
tail -3 $L/tune.log
fi
timeout 150 .device/rustile-bench --ops gemm --mnk 4096x4096x4096,16384x2048x512,2048x2048x2048 --json $L/bench-gemm.json > $L/bench-gemm.log 2>&1; echo "rc=$?" >> $L/bench-gemm.log
grep -E "mma|rc=|rustile |cublas" $L/bench-gemm.log | cut -c1-150 | head -30
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in old new; do
    bin=.device/transformer-np; [ $v = old ] && bin=.device/old/transformer-np
    timeout 120 $bin --shape mid --steps 20 --every 5 --profile > $L/np-$v-$r.log 2>&1; echo "rc=$?" >> $L/np-$v-$r.log
    echo "== $v round $r"; grep -E "median step|rc=" $L/np-$v-$r.log
  done
done
rm -f $L/*.svg; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
