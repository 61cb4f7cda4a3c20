#!/usr/bin/env bash
# Session 27 run 2: cuBLASLt's heuristic list and every algorithm config at 4096³ (with names);
# our mma.sync configs (new: 128×256, BK 32, six stages) by --sweep at 4096³ and 8192³; ncu of our
# best mma.sync kernel and of cuBLASLt's CUTLASS 128×256×32×6 kernel at 4096³.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
cat .device/COMMIT
tar -C .device -xzf .device/bins.tgz
nvcc -O2 -std=c++17 bench/probes/cublaslt_algos.cu -lcublasLt -o /tmp/lt 2>&1 | tail -5
timeout 120 /tmp/lt time 4096 4096 4096 "$OUT/best4096.txt" > "$OUT/lt-time-4096.txt" 2> "$OUT/lt-time-4096.err"
grep heuristic "$OUT/lt-time-4096.txt"
timeout 120 ncu --metrics gpu__time_duration.sum /tmp/lt names 4096 4096 4096 "$OUT/best4096.txt" > "$OUT/lt-names-4096.txt" 2>&1
python3 - "$OUT/lt-names-4096.txt" <<'PY' | tee "$OUT/lt-heuristic-names-4096.txt"
import re, sys
cur = None
for l in open(sys.argv[1]):
    m = re.match(r"\s*marker\(int\) \((\d+), 1, 1\)", l)
    if m: cur = int(m.group(1)); continue
    m = re.match(r"\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context", l)
    if m and cur is not None and cur > 1000: print(f"heuristic choice {cur - 1001}: {m.group(1)[:160]}"); cur = None
PY
echo "==> our configs, --sweep"
for i in 1 2; do timeout 200 .device/rustile-bench --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --sweep --no-torch --reps 50 2>&1 | grep -E "^gemm .*(mma|cuBLAS|wgmma)|^gemm +[0-9]" ; done > "$OUT/ours-sweep.txt"
grep -E "mma.sync|cuBLAS " "$OUT/ours-sweep.txt"
echo "==> ncu"
timeout 200 ncu --clock-control none --set full --import-source no -k "regex:cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x6" --launch-count 1 -f -o "$OUT/cutlass" \
   /tmp/lt names 4096 4096 4096 "$OUT/best4096.txt" > "$OUT/cutlass.run.log" 2>&1
ncu -i "$OUT/cutlass.ncu-rep" --page details > "$OUT/cutlass.details.txt" 2>&1
ncu -i "$OUT/cutlass.ncu-rep" --page source --print-source sass --csv > "$OUT/cutlass.sass.csv" 2>&1
OUT=$OUT bash bench/probes/ncu_gemm.sh 4096x4096x4096 "gemm_nt_kernel__BM128_BN256_BK32_WARPS8_STAGES6_SMEM147456__bf16$" "gemm_nt_kernel__BM128_BN128_BK64_WARPS4_STAGES3_SMEM98304__bf16$" > "$OUT/ncu-ours.txt" 2>&1
cat "$OUT/ncu-ours.txt"
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy" "$OUT/cutlass.details.txt" | head
cd "$OUT" && tar czf /tmp/logs.tgz --exclude='*.ncu-rep' * && rm -rf ./* && mv /tmp/logs.tgz .
