#!/bin/bash
# On the H100: the Python package (wheel built here) on CUDA tensors: its tests with RUSTILE_TEST_CUDA=1
# (the ops on CUDA tensors; the torch layer: opcheck, autograd against float64, the QuasarAttention module,
# torch.compile fullgraph, CUDA graphs); memcheck over the ops' tests and the new torch tests.
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl > $OUT/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $OUT/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $OUT/pip.log 2>&1; echo "pip rc=$?" >> $OUT/pip.log
RUSTILE_TEST_CUDA=1 timeout 400 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?" >> $OUT/pytest.log
grep -E "FAILED|Error|passed|failed|rc=" $OUT/pytest.log | tail -25
RUSTILE_TEST_CUDA=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_ops.py > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck.log | tail -4
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_torch_cuda.py -k "quasar or pieces or opcheck" > $OUT/memcheck_torch.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck_torch.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck_torch.log | tail -4
