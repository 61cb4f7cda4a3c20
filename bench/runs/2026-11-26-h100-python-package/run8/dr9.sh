#!/bin/bash
# On the H100: the Python package (wheel built here) on CUDA tensors: its tests with RUSTILE_TEST_CUDA=1 (NumPy-style ops on CUDA tensors, the torch layer:
# opcheck, autograd against float64, torch.compile fullgraph, CUDA graphs, the call overhead); then the layer's bench (each convolution kernel's fastest config first)
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
python3 --version > $OUT/pip.log; python3 -c "import ml_dtypes, numpy, torch; print(ml_dtypes.__version__, numpy.__version__, torch.__version__)" >> $OUT/pip.log 2>&1
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl >> $OUT/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $OUT/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $OUT/pip.log 2>&1; echo "pip rc=$?" >> $OUT/pip.log
RUSTILE_TEST_CUDA=1 timeout 400 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?" >> $OUT/pytest.log
tail -5 $OUT/pytest.log
timeout 60 python3 bench/python_call.py > $OUT/python_call.log 2>&1; cat $OUT/python_call.log
RUSTILE_TEST_CUDA=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q -x python/tests/test_ops.py > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/memcheck.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $OUT/memcheck.log | tail -4
timeout 120 python3 bench/trimul_python.py > $OUT/trimul_python.log 2>&1; echo "rc=$?" >> $OUT/trimul_python.log; cat $OUT/trimul_python.log
if [ -n "${TRIMUL:-}" ] && [ -f .device/bins.txz ]; then
  tar -C .device -xJf .device/bins.txz
  for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
      [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
  done
  export RUSTILE_COMMIT=$(cat .device/COMMIT)
  timeout 150 .device/rustile-bench --ops trimul --no-torch --json $OUT/bench-trimul.json > $OUT/bench-trimul.log 2>&1; echo "bench rc=$?" >> $OUT/bench-trimul.log
  grep -E "geometric|rc=|^trimul " $OUT/bench-trimul.log | tail -12
  timeout 120 python3 bench/trimul_python.py > $OUT/trimul_python2.log 2>&1; cat $OUT/trimul_python2.log
fi
if [ -n "${BENCH:-}" ] && [ -f .device/bins.txz ]; then
  tar -C .device -xJf .device/bins.txz
  for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
      [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
  done
  export RUSTILE_COMMIT=$(cat .device/COMMIT)
  timeout 150 .device/rustile-bench --ops quasar --no-torch --tokens 4096,65536,1000000 --json $OUT/bench-quasar.json > $OUT/bench-quasar.log 2>&1; echo "bench rc=$?" >> $OUT/bench-quasar.log
  grep -E "quasar T|by kernel|rc=" $OUT/bench-quasar.log | cut -c1-500
fi
