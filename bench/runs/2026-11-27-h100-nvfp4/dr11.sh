#!/bin/bash
# On the H100: (1) the NVFP4 GPU tests (dual GEMM at odd shapes and GPU MODE's, quantize) and memcheck of the
# small ones; (2) the NVFP4 bench beside dequantize+cuBLAS, cuBLAS and our f16 dual GEMM; (3) the Python
# package's tests on CUDA tensors and memcheck (the wheel built here).
OUT=${OUT:-out}; mkdir -p $OUT
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1)
timeout 240 $G nvfp4 --include-ignored --test-threads=1 > $OUT/test.log 2>&1; echo "tests rc=$?" >> $OUT/test.log
grep -E "^test |panicked|test result|rc=" $OUT/test.log | cut -c1-300
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 $G --include-ignored --test-threads=1 --exact dual_gemm_nvfp4_matches_float64_at_odd_shapes nvfp4_quantize_matches_the_reference_bit_for_bit > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
grep -E "ERROR SUMMARY|test result|rc=" $OUT/memcheck.log | tail -3
timeout 200 .device/rustile-bench --ops dual_gemm_nvfp4 --no-torch --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
grep -E "nvfp4|rc=" $OUT/bench.log | cut -c1-400 | tail -30
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl > $OUT/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $OUT/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $OUT/pip.log 2>&1; echo "pip rc=$?" >> $OUT/pip.log
RUSTILE_TEST_CUDA=1 timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?" >> $OUT/pytest.log
grep -E "^FAILED|passed|failed|rc=" $OUT/pytest.log | tail -12
RUSTILE_TEST_CUDA=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_ops.py > $OUT/memcheck_py.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_py.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck_py.log | tail -3
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_torch_cuda.py -k "quasar or pieces or opcheck" > $OUT/memcheck_torch.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_torch.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck_torch.log | tail -3
