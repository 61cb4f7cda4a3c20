#!/bin/bash
# On the GPU: the vision shape's backward (D = 72: the dQ program at D = 80,
# whose source was restructured) against 28a4c30's binaries
# (.device/old-*.txz), each in its own process, alternating, three rounds.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
[ -d .device/pack ] || tar -C .device -xJf .device/bins.txz
mkdir -p .device/old && tar -C .device/old -xJf $(ls .device/old-*.txz | head -1)
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
for r in 1 2 3; do
  for v in old new; do
    B=.device/rustile-bench; [ $v = old ] && B=.device/old/rustile-bench
    timeout 100 $B --ops attention --no-torch --attn 64x256x256x16x16x72,1x4096x4096x16x16x72 --json /tmp/b.json > $L/bench-$v-$r.log 2>&1; echo "bench rc=$?" >> $L/bench-$v-$r.log
    echo "== $v round $r"; awk '/^attn[a-z_]* [0-9]+x/ {s=$2} /^  backward/ {print s, $2} /rc=/' $L/bench-$v-$r.log | paste -sd' '
  done
done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
