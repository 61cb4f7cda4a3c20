#!/bin/bash
# On the H100: the bf16 GEMMs of this tree against the previous binaries
# (.device/bins-prev.txz, 36e1f63), four rounds, the order alternating, to
# tell a change of the GEMMs from the runs' spread.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
mkdir -p .device/prev && tar -C .device/prev -xJf .device/bins-prev.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt
for i in 1 2 3 4; do
  order="now prev"; [ $((i % 2)) = 0 ] && order="prev now"
  for b in $order; do
    B=.device/rustile-bench; C=$(cat .device/COMMIT); [ $b = prev ] && B=.device/prev/rustile-bench && C=36e1f63
    RUSTILE_COMMIT=$C timeout 70 $B --ops gemm --mnk 4096x4096x4096,8192x8192x8192 --no-torch --json $L/gemm-$b-$i.json > $L/gemm-$b-$i.log 2>&1; echo "bench rc=$?" >> $L/gemm-$b-$i.log
    echo "== $b $i"; grep -E "^gemm .* (rustile|cublas) |rc=" $L/gemm-$b-$i.log | cut -c1-90
  done
done
rm -f $L/*.svg $L/*.json; tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
