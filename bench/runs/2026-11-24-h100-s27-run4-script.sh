#!/usr/bin/env bash
# Session 27 run 4: the probe with every config's C checked (ok / relu / wrong) at 4096³ and the
# kernel names; the bench's cuBLASLt row (fastest right listed config) beside our mma.sync row.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
cat .device/COMMIT
tar -C .device -xzf .device/bins.tgz
nvcc -O2 -std=c++17 bench/probes/cublaslt_algos.cu -lcublasLt -o /tmp/lt 2>&1 | tail -5
for s in 4096 8192; do
  timeout 200 /tmp/lt time $s $s $s "$OUT/best$s.txt" > "$OUT/lt-time-$s.txt" 2> "$OUT/lt-time-$s.err"; echo "exit $?"
  timeout 120 ncu --metrics gpu__time_duration.sum /tmp/lt names $s $s $s "$OUT/best$s.txt" > "$OUT/lt-names-$s.txt" 2>&1
  python3 - "$OUT/lt-names-$s.txt" "$OUT/best$s.txt" "$OUT/lt-time-$s.txt" <<'PY' | tee "$OUT/lt-summary-$s.txt"
import re, sys
best = [l.split() for l in open(sys.argv[2])]
names, cur = {}, None
for l in open(sys.argv[1]):
    m = re.match(r"\s*marker\(int\) \((\d+), 1, 1\)", l)
    if m: cur = int(m.group(1)); continue
    m = re.match(r"\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context", l)
    if m and cur is not None and cur not in names: names[cur] = m.group(1)
for l in open(sys.argv[3]):
    if l.startswith("heuristic"): print(l.rstrip(), "|", names.get(1001 + int(l.split()[2]), "?")[:80])
for i, b in sorted(enumerate(best), key=lambda r: float(r[1][6])):
    print(f"{float(b[6]):9.1f} us {float(b[7]):6.1f} TFLOP/s {b[8]:5s} algo {b[0]:>3} tile {b[1]:>3} stages {b[2]:>3} swz {b[4]} custom {b[5]}  {names.get(i + 1, '?')[:120]}")
PY
  awk '$1 ~ /^[0-9]+$/ {print $9}' "$OUT/lt-time-$s.txt" | sort | uniq -c
done
echo "==> bench"
for i in 1 2; do timeout 300 .device/rustile-bench --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch 2>&1 | grep -E "^gemm +[0-9]|listed|failed" | grep -E "mma|cublas|listed|failed|rustile  "; done | tee "$OUT/bench.txt"
echo "==> default gemm shapes"
/usr/bin/time -f "%e s" timeout 400 .device/rustile-bench --ops gemm --no-torch > "$OUT/bench-default.txt" 2>&1
grep -E "^gemm +[0-9]|listed| s$|failed" "$OUT/bench-default.txt" | grep -E "mma|cublas|listed| s$|failed"
cd "$OUT" && tar czf /tmp/logs.tgz * && rm -rf ./* && mv /tmp/logs.tgz .
