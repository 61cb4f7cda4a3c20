#!/bin/bash
# On the H100: the layer beside torch+FLA at every length (the RESULTS table), with the per-kernel profile.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt
python3 -m pip install --no-deps --no-index .device/wheels/fla_core-*.whl .device/wheels/einops-*.whl > $L/pip.log 2>&1
timeout 400 .device/rustile-bench --ops quasar --tokens ${TOKENS:-4096,16384,65536,100000,500000,1000000} --json $L/bench.json > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
rm -f $L/*.svg
grep -E "quasar T|by kernel|rc=" $L/bench.log | cut -c1-600; grep -E "^quasar" $L/bench.log | tail -12
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
