#!/bin/bash
# On the GPU: the one-pass convolution backward with whole-chunk accesses (no
# per-element path in its loop), its walk bounded by the sequence's end, blocks
# of 16 and 32 rows for few tokens, and the delta rule's scan not copying Q
# when it records states; against 28a4c30's binaries (.device/old-*.txz). The
# convolution's GPU test (every config) and the layer's, memcheck of both
# tests, the layer old and new alternating, every config of the backward at
# three lengths, and Nsight Compute on the default one at 1M.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf $(ls .device/old-*.txz | head -1)
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
OPS=$(ls .device/gpu_ops-* | head -1); Q=$(ls .device/quasar-* | head -1)
timeout 120 $OPS conv_silu --include-ignored --test-threads=1 --nocapture > $L/test-ops.log 2>&1; echo "rc=$?" >> $L/test-ops.log
timeout 200 $Q --include-ignored --test-threads=1 --nocapture > $L/test-layer.log 2>&1; echo "rc=$?" >> $L/test-layer.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $OPS conv_silu --include-ignored --test-threads=1 > $L/memcheck-ops.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-ops.log
grep -E "test |test result|panicked|rc=|SKIPPED" $L/test-ops.log | cut -c1-250 | tail -20; grep -E "out cos|test result|panicked|rc=|SKIPPED" $L/test-layer.log | sed 's/(seed [0-9]*)//' | cut -c1-200
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $Q --include-ignored --test-threads=1 seed_layer_on_the_gpu_at_4096 > $L/memcheck-layer.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck-layer.log
grep -E "ERROR SUMMARY|rc=" $L/memcheck-ops.log $L/memcheck-layer.log
for round in ${ROUNDS-1 2}; do
  for which in old new; do
    B=.device/rustile-bench; [ $which = old ] && B=.device/old/rustile-bench
    timeout 150 $B --ops quasar --no-torch --tokens 4096,65536,1000000 > $L/layer-$which-$round.log 2>&1; echo "bench rc=$?" >> $L/layer-$which-$round.log
    echo "== layer $which round $round"; grep -E "quasar T|backward by kernel|rc=" $L/layer-$which-$round.log | cut -c1-330
  done
done
for cfg in ${CONFIGS:-BT64_BC256_WARPS1_AHEAD2 BT128 BT32_BC256 BT16}; do
    RUSTILE_QUASAR_CONFIG=$cfg timeout 150 .device/rustile-bench --ops quasar --no-torch --tokens 4096,65536,1000000 > $L/layer-$cfg.log 2>&1; echo "bench rc=$?" >> $L/layer-$cfg.log
    echo "== layer $cfg"; grep -E "quasar T|backward by kernel|rc=" $L/layer-$cfg.log | cut -c1-330
done
NCU=/usr/local/cuda/bin/ncu
for K in ${KERNELS:-conv_silu_bwd}; do
timeout 150 $NCU --kernel-name regex:$K --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
    --import-source no -o /tmp/prof-$K -f .device/rustile-bench --ops quasar --tokens 1000000 --no-torch > $L/ncu-run-$K.log 2>&1
$NCU -i /tmp/prof-$K.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2>&1
$NCU -i /tmp/prof-$K.ncu-rep --print-details all > $L/ncu-$K.log 2>&1
python3 bench/ncu_hot.py /tmp/source.csv > $L/hot-$K.txt
echo "== ncu $K"; grep -E "Grid Size|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|DRAM Throughput|Warp Cycles Per Issued" $L/ncu-$K.log | head -12
head -25 $L/hot-$K.txt | cut -c1-180
done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
