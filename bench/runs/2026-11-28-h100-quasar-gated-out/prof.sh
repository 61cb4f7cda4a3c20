#!/bin/bash
# On the H100: one Nsight Compute profile of gated_out_proj_kernel in the QuasarAttention layer at 65,536 tokens
# (the kernel named by the regex $1) with warp stall samples by SASS line; the 45 lines
# with the most samples go to $OUT/hot.txt.
OUT=${OUT:-out}; mkdir -p $OUT
[ -d .device/pack ] || tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
NCU=/usr/local/cuda/bin/ncu
timeout 240 $NCU --kernel-name regex:${1:-gated_out_proj} --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section SchedulerStats --section Occupancy \
    --import-source no -o /tmp/prof -f .device/rustile-bench --ops quasar --tokens 65536 --no-torch > $OUT/ncu-run.log 2>&1
$NCU -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2>&1
$NCU -i /tmp/prof.ncu-rep --print-details all > $OUT/ncu.log 2>&1
python3 - > $OUT/hot.txt <<'PY'
import csv
rows = list(csv.reader(open('/tmp/source.csv')))
h = next(i for i, r in enumerate(rows) if 'Source' in r)
head, rows = rows[h], rows[h:]
print(head)
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
head -60 $OUT/hot.txt
