#!/bin/bash
# On the H100, after tensor maps moved to memset-written slots (capturable):
# host tests; the TMA GEMM tests and the TransformerNP graph replay; the Python
# package on CUDA (each capture case in its own process) and memcheck; the Python
# call's overhead. Logs bundled into logs.tgz (the run returns 8 files at most).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export RUSTILE_COMMIT=$(cat .device/COMMIT)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
G=$(ls .device/gpu_ops-* | head -1); H=$(ls .device/gpu-* | head -1); T=$(ls .device/transformer_np-* | head -1)
timeout 60 $H --include-ignored --test-threads=1 > $L/host.log 2>&1; echo "host rc=$?" >> $L/host.log
grep -E "test result|panicked|rc=" $L/host.log | tail -2
timeout 200 $G --include-ignored --test-threads=1 gemm tensor_maps concurrent attention_matches > $L/test.log 2>&1; echo "tests rc=$?" >> $L/test.log
grep -E "^test |panicked|test result|rc=" $L/test.log | cut -c1-200
timeout 120 $T --include-ignored --test-threads=1 graph_replay > $L/tnp.log 2>&1; echo "tnp rc=$?" >> $L/tnp.log
grep -E "^test |test result|rc=" $L/tnp.log | tail -3
python3 -c "import ml_dtypes" 2>/dev/null || python3 -m pip install --no-deps --no-index .device/pywheels/ml_dtypes-*.whl > $L/pip.log 2>&1
python3 -m pip install --no-deps --no-index .device/pywheels/{pytest,pluggy,iniconfig,pygments}-*.whl >> $L/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $L/pip.log 2>&1; echo "pip rc=$?" >> $L/pip.log
RUSTILE_TEST_CUDA=1 timeout 200 python3 -m pytest -q -rf --tb=short python/tests -k "not cuda_graph" > $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
grep -E "^FAILED|^E  |passed|failed|rc=" $L/pytest.log | cut -c1-250 | tail -24
for c in attention attention_varlen softmax gemm_fp8 rms_norm layer_norm linear dual_gemm delta_rule delta_rule_varlen conv_silu gated_rms_norm; do
    timeout 60 python3 -m pytest -q --tb=short "python/tests/test_torch_cuda.py::test_op_and_its_backward_replay_in_a_cuda_graph[$c]" > $L/graph-$c.log 2>&1
    echo "graph $c rc=$? $(grep -E '^E  ' $L/graph-$c.log | head -2 | cut -c1-200)"
done
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 86 python3 -m pytest -q python/tests/test_torch_cuda.py -k "side_stream or dual or grouped or packed or varlen or attention_autograd" > $L/memcheck_torch.log 2>&1; echo "memcheck rc=$?" >> $L/memcheck_torch.log
grep -E "ERROR SUMMARY|passed|failed|rc=" $L/memcheck_torch.log | tail -3
for i in 1 2 3; do timeout 60 python3 bench/python_call.py > $L/python_call$i.log 2>&1; done
tail -n 8 $L/python_call*.log
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
