#!/usr/bin/env bash
# One call on the GPU machine (no Rust there): the GPU tests, the GEMM family's
# check against cuBLAS, optionally the autotuner, then the bench. Binaries are
# built here and carried in .device/ (bench/RESULTS.md says how).
# Usage on the device: [TESTS=0] [TUNE=1] [BENCH=0] bash bench/device_run.sh [bench args...];
# logs and the tuned table go to $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export RUSTILE_COMMIT=$(cat .device/COMMIT 2>/dev/null || echo unknown)
# The binaries travel compressed (the carry limit is 64 MiB; the cubins in them compress well).
[ -f .device/bins.tgz ] && tar -C .device -xzf .device/bins.tgz
# cuBLAS (the GEMM baseline) is loaded at run time: CUDA's own, else PyTorch's wheel.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
status=0
if [ "${TESTS:-1}" = 1 ]; then
    for t in .device/gpu-* .device/gpu_ops-*; do
        [ -e "$t" ] || continue
        echo "==> $t"
        timeout 420 "$t" --include-ignored --test-threads=1 2>&1 | tee -a "$OUT/gpu_tests.log" || status=1
    done
    echo "==> check the GEMM family against cuBLAS"
    timeout 120 .device/rustile-bench --check --ops gemm,dual_gemm,gemm_fp8 --mnk 777x1030x520,4096x4096x4096,16x4096x4096 2>&1 | tee "$OUT/check.log" || status=1
fi
if [ "${TUNE:-0}" = 1 ]; then
    echo "==> rustile-tune --arch sm90 (what cargo xtask autotune runs)"
    cp tuned/sm90.toml "$OUT/sm90.toml" 2>/dev/null
    timeout ${TUNE_S:-300} .device/rustile-tune --arch sm90 --out "$OUT/sm90.toml" 2>&1 | tee "$OUT/tune.log" || status=1
fi
if [ "${BENCH:-1}" = 1 ]; then
    echo "==> bench"
    PYTHONUNBUFFERED=1 timeout 420 .device/rustile-bench --json "$OUT/results.json" "$@" 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
