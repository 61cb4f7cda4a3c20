#!/usr/bin/env bash
# Call A: re-tune the sm90 table, TriMul after the col_allreduce change (tests, bench), the small TransformerNP step with split-K 128x128.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"; L=$OUT/logs
tar -C .device -xJf .device/bins.txz || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .device/bins.txz .device
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"; cat .device/COMMIT | tee -a "$OUT/gpu.txt"
export RUSTILE_COMMIT=$(cat .device/COMMIT)
s=$SECONDS; timeout 240 .device/gpu_ops-* trimul --include-ignored --test-threads=1 > $L/gpu_ops_trimul.txt 2>&1; echo "gpu_ops trimul rc=$? $((SECONDS-s)) s"; tail -3 $L/gpu_ops_trimul.txt
s=$SECONDS; timeout 120 .device/gpu_fuzz-* trimul --include-ignored --test-threads=1 > $L/gpu_fuzz_trimul.txt 2>&1; echo "gpu_fuzz trimul rc=$? $((SECONDS-s)) s"; tail -3 $L/gpu_fuzz_trimul.txt
s=$SECONDS; timeout 150 .device/transformer-np --shape small --steps 20 --every 5 --graphs --profile > $L/small-graphs.txt 2>&1; echo "tnp rc=$? $((SECONDS-s)) s"; grep -E "^(summary|floor|median)" $L/small-graphs.txt; sed -n "/^profile/,\$p" $L/small-graphs.txt | head -32
s=$SECONDS; timeout 150 .device/rustile-bench --ops trimul --json $OUT/trimul.json > $L/bench_trimul.txt 2>&1; echo "bench trimul rc=$? $((SECONDS-s)) s"; tail -25 $L/bench_trimul.txt
s=$SECONDS; cp tuned/sm90.toml $OUT/sm90.toml; timeout ${TUNE_S:-300} .device/rustile-tune --arch sm90 --out $OUT/sm90.toml > $L/tune.txt 2>&1; echo "tune rc=$? $((SECONDS-s)) s"; tail -8 $L/tune.txt
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $L
