#!/usr/bin/env bash
# Session 27 run 1: cuBLASLt's own algorithms for the bf16 GEMM at 4096³ and 8192³, every config
# timed; the kernel each algorithm's best config launches (ncu), to tell its mma.sync (sm80)
# kernels from its Hopper ones; our mma.sync GEMM in the same call.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
cat .device/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
[ -x .device/rustile-bench ] || tar -C .device -xzf .device/bins.tgz
nvcc -O2 -std=c++17 bench/probes/cublaslt_algos.cu -lcublasLt -o /tmp/lt 2>&1 | tail -5
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 1000 > "$OUT/clocks.csv" &
SMI=$!
for s in 4096 8192; do
  echo "==> cuBLASLt configs at ${s}³"
  timeout 280 /tmp/lt time $s $s $s "$OUT/best$s.txt" > "$OUT/lt-time-$s.txt" 2> "$OUT/lt-time-$s.err"
  echo "exit $?"; head -3 "$OUT/lt-time-$s.txt"; grep -c . "$OUT/lt-time-$s.txt"
done
kill $SMI
for s in 4096 8192; do
  [ -f "$OUT/best$s.txt" ] || continue
  echo "==> kernel names at ${s}³"
  timeout 120 ncu --metrics gpu__time_duration.sum /tmp/lt names $s $s $s "$OUT/best$s.txt" > "$OUT/lt-names-$s.txt" 2>&1
  python3 - "$OUT/lt-names-$s.txt" "$OUT/best$s.txt" <<'PY' | tee "$OUT/lt-summary-$s.txt"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
best = [l.split() for l in open(sys.argv[2])]
names, cur = {}, None
for l in lines:
    m = re.match(r"\s*marker\(int\) \((\d+), 1, 1\)", l)
    if m: cur = int(m.group(1)); continue
    m = re.match(r"\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context", l)
    if m and cur is not None and cur not in names: names[cur] = m.group(1)
rows = sorted(((float(b[6]), float(b[7]), i + 1, b) for i, b in enumerate(best)), key=lambda r: r[0])
for us, tf, i, b in rows:
    print(f"{us:9.1f} us {tf:6.1f} TFLOP/s algo {b[0]:>3} tile {b[1]:>3} stages {b[2]:>3} swz {b[4]} custom {b[5]}  {names.get(i, '?')[:150]}")
PY
done
echo "==> ours, mma.sync and Hopper"
for i in 1 2; do timeout 200 .device/rustile-bench --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch --reps 50 2>&1 | grep -E "gemm|mma|cuBLAS" | head -20; done | tee "$OUT/ours.txt"
