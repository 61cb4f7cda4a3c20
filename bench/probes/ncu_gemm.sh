#!/usr/bin/env bash
# Profiles GEMM configs with Nsight Compute on the GPU machine: the details
# page (throughputs, stall reasons) and the per-SASS-instruction stall samples.
# Usage on the device: OUT=... [OPS=gemm] [SKIP=2] bash bench/probes/ncu_gemm.sh MxNxK config-regex...
# SKIP: matching launches to pass over (default: the check run and a warm-up;
# gemm_fp8's launch 0 is the product without scales, launch 1 with them).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
shape=$1; shift
skip=${SKIP:-2}
[ -f .device/bins.txz ] && [ ! -x .device/rustile-bench ] && tar -C .device -xJf .device/bins.txz
for cfg in "$@"; do
    name=$(echo "$cfg" | tr -c 'A-Za-z0-9_\n' _)_$skip
    timeout 240 ncu --clock-control none --set full --import-source no \
        -k "regex:${cfg}" --launch-skip $skip --launch-count 1 -f -o "$OUT/$name" \
        .device/rustile-bench --ops "${OPS:-gemm}" --mnk "$shape" --sweep --no-torch --reps 3 > "$OUT/$name.run.log" 2>&1
    ncu -i "$OUT/$name.ncu-rep" --page details > "$OUT/$name.details.txt" 2>&1
    ncu -i "$OUT/$name.ncu-rep" --page source --print-source sass --csv > "$OUT/$name.sass.csv" 2>&1
    echo "== $cfg"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy" "$OUT/$name.details.txt" | head -20
done
