#!/bin/bash
# On the H100: the TransformerNP's forward with FP8 attention beside bf16 at
# issue 7's mid shape; why graph captures fail under compute-sanitizer
# (PyTorch alone, then our softmax, then packed attention, each in its own process).
OUT=${OUT:-out}; mkdir -p $OUT/l; L=$OUT/l
tar -C .device -xJf .device/bins.txz
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
T=$(ls .device/transformer_np-* | head -1)
timeout 200 $T --include-ignored --test-threads=1 --nocapture fp8 > $L/tnp-fp8.log 2>&1; echo "tnp rc=$?" >> $L/tnp-fp8.log
grep -E "outputs relative|test result|rc=" $L/tnp-fp8.log
python3 -m pip install --no-deps --no-index .device/pywheels/{ml_dtypes,pytest,pluggy,iniconfig,pygments}-*.whl > $L/pip.log 2>&1
python3 -m pip install --no-deps --force-reinstall .device/pkg/rustile-*.whl >> $L/pip.log 2>&1; echo "pip rc=$?" >> $L/pip.log
cat > $L/torch_only.py <<'PY'
import torch
x = torch.randn(64, 512, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    y = torch.softmax(x, -1) * 2
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = torch.softmax(x, -1) * 2
g.replay(); torch.cuda.synchronize(); print("torch-only capture ok")
PY
timeout 60 compute-sanitizer --tool memcheck python3 $L/torch_only.py > $L/ms-torch.log 2>&1; echo "torch-only rc=$? $(grep -E 'ERROR SUMMARY|ok$|Program hit' $L/ms-torch.log | head -3 | cut -c1-200)"
for c in softmax attention attention_varlen linear; do
    timeout 90 compute-sanitizer --tool memcheck python3 -m pytest -q --tb=line "python/tests/test_torch_cuda.py::test_op_and_its_backward_replay_in_a_cuda_graph[$c]" > $L/ms-$c.log 2>&1
    echo "memcheck graph $c rc=$? $(grep -E 'ERROR SUMMARY|passed|failed|Program hit' $L/ms-$c.log | head -3 | cut -c1-200)"
done
tar -C $OUT -czf $OUT/logs.tgz l && rm -rf $L
