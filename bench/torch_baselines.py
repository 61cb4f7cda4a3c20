#!/usr/bin/env python3
"""PyTorch baselines for rustile-bench: times torch eager and torch.compile.

Example:
  python3 bench/torch_baselines.py --ops add,softmax --rows 8192 --cols 8192 \
      --numel 268435456 --dtype bf16 --json out.json

Writes {"device", "torch", "rows": [{op, shape, dtype, impl, median_ms, bytes}]}.
Shapes are written "8192x8192" (or "268435456"), as the Rust side writes them,
so the two sets of rows line up. Progress goes to stderr.
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
OPS = ["add", "swiglu", "softmax", "layernorm", "rmsnorm", "gemm"]


def problem(op, args, dtype):
    """(function, inputs, shape, bytes moved) for one op, on fresh random inputs."""
    n, rows, cols = args.numel, args.rows, args.cols
    size = torch.empty((), dtype=dtype).element_size()

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    if op == "add":
        return (lambda x, y: x + y), [randn(n), randn(n)], [n], 3 * n * size
    if op == "swiglu":
        return (lambda a, b: F.silu(a) * b), [randn(n), randn(n)], [n], 3 * n * size
    if op == "softmax":
        return (lambda x: torch.softmax(x, dim=-1)), [randn(rows, cols)], [rows, cols], 2 * rows * cols * size
    if op == "layernorm":
        fn = lambda x, w, b: F.layer_norm(x, (cols,), w, b, eps=1e-5)
        inputs = [randn(rows, cols), randn(cols), randn(cols)]
        return fn, inputs, [rows, cols], 2 * rows * cols * size + 2 * cols * size
    if op == "rmsnorm":
        fn = lambda x, w: F.rms_norm(x, (cols,), w, eps=1e-6)
        return fn, [randn(rows, cols), randn(cols)], [rows, cols], 2 * rows * cols * size + cols * size
    if op == "gemm":
        m, n, k = args.mnk
        return (lambda a, b: a @ b.T), [randn(m, k), randn(n, k)], [m, n, k], (m * k + n * k + m * n) * size
    raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")


def time_ms(fn, inputs):
    # do_bench warms up, clears L2 before every repetition and times each
    # with CUDA events; the median is what the Rust side reports too.
    return do_bench(lambda: fn(*inputs), warmup=25, rep=100, return_mode="median")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--numel", type=int, default=1 << 28)
    p.add_argument("--mnk", default="4096,4096,4096", type=lambda v: [int(x) for x in v.split(",")])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--json", required=True)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baselines.py: torch sees no CUDA device")

    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    rows = []
    for op in [o for o in args.ops.split(",") if o]:
        fn, inputs, shape, nbytes = problem(op, args, dtype)
        compiled = torch.compile(fn)
        # Compile now, not inside the timing, and check it agrees with eager.
        want, got = fn(*inputs), compiled(*inputs)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        if not torch.allclose(want.float(), got.float(), rtol=tol, atol=tol):
            print(f"warning: torch.compile {op} differs from eager", file=sys.stderr)
        del want, got
        for name, f in [("torch eager", fn), ("torch.compile", compiled)]:
            ms = time_ms(f, inputs)
            shape_s = "x".join(map(str, shape))
            print(f"{op:10} {shape_s:>16} {args.dtype:5} {name:14} {ms * 1e3:9.1f} us "
                  f"{nbytes / ms / 1e6:7.0f} GB/s", file=sys.stderr)
            row = {"op": op, "shape": shape_s, "dtype": args.dtype, "impl": name, "median_ms": ms, "bytes": nbytes}
            if op == "gemm":
                row["flops"] = 2.0 * shape[0] * shape[1] * shape[2]
            rows.append(row)
        del inputs, fn, compiled
        torch.cuda.empty_cache()

    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
