#!/bin/bash
# On the H100: Nsight Compute profiles of the attention backward at 4×4096², 32
# heads, D = 64: the dK/dV program that makes dQ (`_DQ1_`), and the default's
# dK/dV and dQ programs; durations, pipes and warp states to $OUT/ncu-*.log, the
# fused program's 45 SASS lines with the most stall samples to $OUT/hot-dq.txt.
OUT=${OUT:-out}; mkdir -p $OUT
[ -d .device/pack ] || tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
NCU=/usr/local/cuda/bin/ncu
prof() { # name config kernel-regex
    RUSTILE_ATTENTION_CONFIG=$2 timeout 200 $NCU --kernel-name regex:$3 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section SpeedOfLight --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --import-source no -o /tmp/$1 -f .device/rustile-bench --ops attention --attn 4x4096x4096x32x32x64 --no-torch > $OUT/ncu-run-$1.log 2>&1
    $NCU -i /tmp/$1.ncu-rep --print-details all > $OUT/ncu-$1.log 2>&1
    grep -E "^  [a-z_]+kernel|Duration|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Stall|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput" $OUT/ncu-$1.log | head -24
}
prof dq _DQ1_ attention_bwd_kv_wgmma
prof kv none attention_bwd_kv_wgmma
prof q none attention_bwd_q_wgmma
$NCU -i /tmp/dq.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2>&1
python3 - > $OUT/hot-dq.txt <<'PY'
import csv
rows = list(csv.reader(open('/tmp/source.csv')))
h = next(i for i, r in enumerate(rows) if 'Source' in r)
head, rows = rows[h], rows[h:]
def col(name):
    return next((i for i, h in enumerate(head) if h == name), None)
s, src = col('Warp Stall Sampling (All Samples)'), col('Source')
stalls = [i for i, h in enumerate(head) if h.startswith('stall_') and 'Not Issued' not in h]
data = [r for r in rows[1:] if len(r) == len(head)]
tot = sum(float(r[s] or 0) for r in data)
print('samples', tot)
for r in sorted(data, key=lambda r: -float(r[s] or 0))[:45]:
    top = sorted(((float(r[i] or 0), head[i]) for i in stalls), reverse=True)[:3]
    print(f"{r[0]:>6} {float(r[s]):6.0f} {r[src][:60]:60} " + " ".join(f"{h}={v:.0f}" for v, h in top if v))
PY
head -30 $OUT/hot-dq.txt
