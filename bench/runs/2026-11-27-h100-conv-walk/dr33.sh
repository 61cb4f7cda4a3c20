#!/bin/bash
# On the H100: the Python package on CUDA tensors and every capture case in its own process.
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl > $L/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $L/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $L/pip.log 2>&1; echo "pip rc=$?" >> $L/pip.log
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
RUSTILE_TEST_CUDA=1 timeout 200 python3 -m pytest -q -rf --tb=short python/tests -k "not cuda_graph" > $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
grep -E "^FAILED|^E  |passed|failed|rc=" $L/pytest.log | cut -c1-250 | tail -8
for c in grouped_gemm attention attention_varlen softmax gemm_cast gemm_fp8 rms_norm layer_norm linear dual_gemm delta_rule delta_rule_varlen conv_silu gated_rms_norm; do
    timeout 60 python3 -m pytest -q --tb=short "python/tests/test_torch_cuda.py::test_op_and_its_backward_replay_in_a_cuda_graph[$c]" > $L/graph-$c.log 2>&1
    echo "graph $c rc=$? $(grep -E '^E  |passed|failed' $L/graph-$c.log | head -2 | cut -c1-200)"
done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
