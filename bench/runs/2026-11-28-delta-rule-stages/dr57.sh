#!/bin/bash
# On the GPU: the delta rule's maps in one program (both maps stacked, each
# chunk read once) and the maps and scan with their next chunk's copies in
# flight. The op's GPU tests (forward, backward) and the layer's, memcheck of
# the op's, then the op alone (no torch) with the previous binaries
# (.device/old-*.txz) and these in alternating rounds, then Nsight Compute's
# stall samples of the Tα solve (delta_rule_chunk_kernel) at a million tokens.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf $(ls .device/old-*.txz | head -1)
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
OPS=$(ls .device/gpu_ops-* | head -1); Q=$(ls .device/quasar-* | head -1)
timeout 200 $OPS delta_rule --include-ignored --test-threads=1 --nocapture > $L/test-ops.log 2>&1; echo "rc=$?" >> $L/test-ops.log
timeout 200 $Q --include-ignored --test-threads=1 --nocapture > $L/test-layer.log 2>&1; echo "rc=$?" >> $L/test-layer.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $OPS delta_rule --include-ignored --test-threads=1 > $L/memcheck-ops.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-ops.log
grep -E "test result|panicked|rc=|SKIPPED|rel" $L/test-ops.log | cut -c1-250 | tail -20; grep -E "out cos|test result|panicked|rc=|SKIPPED" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200
grep -E "ERROR SUMMARY|rc=" $L/memcheck-ops.log
for round in ${ROUNDS-1 2}; do
  for which in old new; do
    B=.device/rustile-bench; [ $which = old ] && B=.device/old/rustile-bench
    timeout 150 $B --ops delta_rule --no-torch --tokens ${TOKENS:-4096,65536,1000000} > $L/bench-$which-$round.log 2>&1; echo "bench rc=$?" >> $L/bench-$which-$round.log
    echo "== $which round $round"; grep -E "chunked|forward\+backward|rc=" $L/bench-$which-$round.log | cut -c1-400
  done
done
if [ -z "${NO_PROF:-}" ]; then
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --kernel-name regex:${KERNEL:-delta_rule_chunk} --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
    --import-source no -o /tmp/prof -f .device/rustile-bench --ops delta_rule --tokens 1000000 --no-torch > $L/ncu-run.log 2>&1
$NCU -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2>&1
$NCU -i /tmp/prof.ncu-rep --print-details all > $L/ncu.log 2>&1
python3 - > $L/hot.txt <<'PY'
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
for r in sorted(data, key=lambda r: -float(r[s] or 0))[:60]:
    top = sorted(((float(r[i] or 0), head[i]) for i in stalls), reverse=True)[:3]
    print(f"{r[0]:>6} {float(r[s]):6.0f} {r[src][:60]:60} " + " ".join(f"{h}={v:.0f}" for v, h in top if v))
PY
grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued" $L/ncu.log | head -20
head -40 $L/hot.txt | cut -c1-200
fi
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
