#!/bin/bash
# On the H100: TriMul as a torch custom op (opcheck, torch.compile) and the package's CUDA tests.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
python3 -m pip install --no-deps --no-index .device/pywheels/{ml_dtypes,pytest,pluggy,iniconfig,pygments}-*.whl > $L/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $L/pip.log 2>&1; echo "pip rc=$?" >> $L/pip.log
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
RUSTILE_TEST_CUDA=1 timeout 150 python3 -m pytest -q -rf --tb=short python/tests -k "not cuda_graph" > $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
grep -E "^FAILED|^E  |passed|failed|rc=" $L/pytest.log | cut -c1-250 | tail -10
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
