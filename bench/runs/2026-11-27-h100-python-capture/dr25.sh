#!/bin/bash
# On the H100: the attention and delta-rule GPU tests after the kernels cut caller
# offsets; the host's stream tests (concurrently on the caller's queue); the Python
# package on CUDA tensors (capture matrix, cu_seqlens, dual/grouped autograd) and
# memcheck; attention bench beside SDPA at a few shapes (the tuned table's configs).
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); F=$(ls .device/gpu_fuzz-* | head -1); H=$(ls .device/gpu-* | head -1)
timeout 100 $H --test-threads=1 > $OUT/host.log 2>&1; echo "host rc=$?" >> $OUT/host.log
grep -E "test result|panicked|rc=" $OUT/host.log | tail -3
timeout 300 $G --include-ignored --test-threads=1 attention delta_rule > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
grep -E "^test |panicked|test result|rc=" $OUT/test.log | cut -c1-200
timeout 120 $F --include-ignored --test-threads=1 attention > $OUT/fuzz.log 2>&1; echo "fuzz rc=$?" >> $OUT/fuzz.log
grep -E "test result|panicked|rc=" $OUT/fuzz.log | tail -3
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl > $OUT/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $OUT/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $OUT/pip.log 2>&1; echo "pip rc=$?" >> $OUT/pip.log
RUSTILE_TEST_CUDA=1 timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?" >> $OUT/pytest.log
grep -E "^FAILED|^ERROR|passed|failed|rc=" $OUT/pytest.log | tail -20
RUSTILE_TEST_CUDA=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_ops.py -k "varlen or delta or offsets" > $OUT/memcheck_py.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_py.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck_py.log | tail -3
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_torch_cuda.py -k "cuda_graph or side_stream or dual or grouped or packed" > $OUT/memcheck_torch.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_torch.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck_torch.log | tail -3
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --test-threads=1 --exact attention_matches_float64 attention_backward_matches_float64 > $OUT/memcheck_rust.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_rust.log
grep -E "ERROR SUMMARY|test result|rc=" $OUT/memcheck_rust.log | tail -3
timeout 150 .device/rustile-bench --ops attention --attn 4x4096x4096x32x32x64,1x11000x10000x8x8x64,4x4096x4096x16x16x128 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "attention|rc=" $OUT/bench.log | cut -c1-300 | tail -20
for i in 1 2 3; do timeout 60 python3 bench/python_call.py > $OUT/python_call$i.log 2>&1; done
tail -4 $OUT/python_call*.log
