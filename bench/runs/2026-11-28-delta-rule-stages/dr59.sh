#!/bin/bash
# On the GPU: the Tα solve with its two warps balanced (the first hands its
# columns' lower rows to the second after 26 steps) against the binaries of
# the commit before (dr58's tree, .device/old-*.txz). The op's GPU tests and
# the layer's, memcheck of the op's, the op alone (no torch) old and new in
# alternating rounds, the layer once each, Nsight Compute on the solve, then
# the op and the layer beside FLA and torch+FLA (no JSON: an H200 run).
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
for round in 1; do
  for which in old new; do
    B=.device/rustile-bench; [ $which = old ] && B=.device/old/rustile-bench
    timeout 150 $B --ops quasar --no-torch --tokens 4096,65536,1000000 > $L/layer-$which-$round.log 2>&1; echo "bench rc=$?" >> $L/layer-$which-$round.log
    echo "== layer $which round $round"; grep -E "quasar T|rc=" $L/layer-$which-$round.log | cut -c1-300
  done
done
NCU=/usr/local/cuda/bin/ncu
for K in ${KERNELS:-delta_rule_chunk}; do
timeout 150 $NCU --kernel-name regex:$K --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
    --import-source no -o /tmp/prof-$K -f .device/rustile-bench --ops delta_rule --tokens 1000000 --no-torch > $L/ncu-run-$K.log 2>&1
$NCU -i /tmp/prof-$K.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2>&1
$NCU -i /tmp/prof-$K.ncu-rep --print-details all > $L/ncu-$K.log 2>&1
python3 - > $L/hot-$K.txt <<'PY'
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
echo "== ncu $K"; grep -E "Grid Size|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|DRAM Throughput|Warp Cycles Per Issued" $L/ncu-$K.log | head -12
head -25 $L/hot-$K.txt | cut -c1-180
done
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $L/pip.log 2>&1
timeout 300 .device/rustile-bench --ops delta_rule,quasar --tokens 65536,1000000 > $L/bench-fla.log 2>&1; echo "bench rc=$?" >> $L/bench-fla.log
echo "== beside FLA"; grep -vE "^\s*$" $L/bench-fla.log | grep -E "delta_rule|fla|chunked|forward|quasar|torch|rc=" | cut -c1-300 | tail -40
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
