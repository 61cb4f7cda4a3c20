#!/bin/bash
# On the H100: the GMM loss GPU test (after the tied-components fix), the
# NVFP4 tuner over every bucket, and one Nsight Compute profile of the
# warp-specialized kernel's memory side (speed of light, memory workload).
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_train-* | head -1)
timeout 60 $G gmm --include-ignored --test-threads=1 > $OUT/test.log 2>&1; echo "gmm tests rc=$?" >> $OUT/test.log
grep -E "^test |test result|rc=" $OUT/test.log
cp tuned/sm90.toml $OUT/sm90.toml
timeout 200 .device/rustile-tune --arch sm90 --op dual_gemm_nvfp4 --out $OUT/sm90.toml > $OUT/tune.log 2>&1; echo "tune rc=$?" >> $OUT/tune.log
grep -E "bucket|rc=|invalid|error" $OUT/tune.log | cut -c1-300
NCU=/usr/local/cuda/bin/ncu
timeout 150 $NCU --kernel-name regex:dual_gemm_nvfp4_ws --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy \
    .device/rustile-bench --ops dual_gemm_nvfp4 --no-torch > $OUT/ncu.log 2>&1; echo "ncu rc=$?" >> $OUT/ncu.log
grep -E "Throughput|Bandwidth|Hit Rate|Duration|Elapsed Cycles|Registers|rc=" $OUT/ncu.log | head -40
