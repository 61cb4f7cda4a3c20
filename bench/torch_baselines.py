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
import contextlib
import json
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
OPS = ["add", "swiglu", "softmax", "layernorm", "rmsnorm", "gemm", "attention", "trimul", "delta_rule", "quasar"]


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


def attention_flops(b, sq, sk, h, d, causal):
    """4·B·H·Sq·Sk·D, without the pairs a top-left causal mask removes (as rustile-bench counts)."""
    if causal:
        full = min(sq, sk)
        pairs = full * (full + 1) / 2 + max(sq - sk, 0) * sk
    else:
        pairs = sq * sk
    return 4.0 * b * h * d * pairs


def longest_kernel(fn):
    """The name of the GPU kernel that takes longest in one call of `fn`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
    if not kernels:
        return "no kernel seen"
    return max(kernels, key=lambda e: e.device_time_total).key[:60]


def forced(backend):
    """SDPA restricted to `backend`; None: SDPA's own choice."""
    from torch.nn.attention import sdpa_kernel

    return contextlib.nullcontext() if backend is None else sdpa_kernel(backend)


def attention_rows(specs, dtype, dtype_name):
    """SDPA's flash and cuDNN backends at each shape `BxSqxSkxHxHkvxD[c]`:
    q [B, Sq, H, D] and k, v [B, Sk, Hkv, D] token-major, as rustile's,
    seen as [B, H, S, D] by a transpose (no copy)."""
    from torch.nn.attention import SDPBackend

    rows = []
    for spec in [x for x in specs.split(",") if x]:
        causal = spec.endswith("c")
        b, sq, sk, h, hkv, d = (int(x) for x in spec.rstrip("c").split("x"))
        op = "attn_causal" if causal else "attn"
        shape_s = "x".join(map(str, (b, sq, sk, h, hkv, d)))
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype).transpose(1, 2)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype).transpose(1, 2)
        flops = attention_flops(b, sq, sk, h, d, causal)
        # "sdpa": no backend forced, what a user calling SDPA gets (its
        # choice is named after the time).
        for name, backend in [("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa", None)]:
            def fn():
                with forced(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
            try:
                torch.cuda.reset_peak_memory_stats()
                fn()
                ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            except RuntimeError as e:
                print(f"{op} {shape_s} {name}: not run ({str(e).splitlines()[0]})", file=sys.stderr)
                continue
            peak = torch.cuda.max_memory_allocated() / 1e9
            picked = f"  ({longest_kernel(fn)})" if backend is None else ""
            print(f"{op:12} {shape_s:>26} {dtype_name:5} {name:11} {ms * 1e3:9.1f} us "
                  f"{flops / ms / 1e9:6.0f} TFLOP/s  peak {peak:.2f} GB{picked}", file=sys.stderr)
            rows.append({"op": op, "shape": shape_s, "dtype": dtype_name, "impl": name, "median_ms": ms, "flops": flops})
            # The backward alone: the graph of one forward, its gradients taken again and again.
            try:
                qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                with forced(backend):
                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, enable_gqa=hkv != h)
                dout = torch.randn_like(out)
                grad = lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)
                grad()
                ms = do_bench(grad, warmup=25, rep=100, return_mode="median")
            except RuntimeError as e:
                print(f"{op}_bwd {shape_s} {name}: not run ({str(e).splitlines()[0]})", file=sys.stderr)
                continue
            print(f"{op + '_bwd':12} {shape_s:>26} {dtype_name:5} {name:11} {ms * 1e3:9.1f} us "
                  f"{2.5 * flops / ms / 1e9:6.0f} TFLOP/s", file=sys.stderr)
            rows.append({"op": op + "_bwd", "shape": shape_s, "dtype": dtype_name, "impl": name, "median_ms": ms, "flops": 2.5 * flops})
            del qg, kg, vg, out, dout
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def trimul_reference(x, mask, p):
    """The outgoing triangle multiplicative update, written as the math reads (fp32)."""
    dim, hidden = x.shape[-1], p["out_norm_w"].shape[0]
    x = F.layer_norm(x, (dim,), p["norm_w"], p["norm_b"], eps=1e-5)
    m = mask.unsqueeze(-1)
    left = F.linear(x, p["left"]) * m * torch.sigmoid(F.linear(x, p["left_gate"]))
    right = F.linear(x, p["right"]) * m * torch.sigmoid(F.linear(x, p["right_gate"]))
    t = torch.einsum("bikd,bjkd->bijd", left, right)
    u = F.layer_norm(t, (hidden,), p["out_norm_w"], p["out_norm_b"], eps=1e-5) * torch.sigmoid(F.linear(x, p["out_gate"]))
    return F.linear(u, p["out"])


def trimul_rows(specs):
    """The reference in eager PyTorch and under torch.compile at each shape
    `NxBxD[m][c]` (m: masked, c: x from Cauchy(0, 2)); hidden 128."""
    rows = []
    compiled = torch.compile(trimul_reference)
    for spec in [x for x in specs.split(",") if x]:
        body = spec.rstrip("mc")
        masked, cauchy = "m" in spec[len(body):], "c" in spec[len(body):]
        n, b, dim = (int(x) for x in body.split("x"))
        hidden = 128
        x = torch.empty(b, n, n, dim, device="cuda")
        x.cauchy_(0, 2) if cauchy else x.normal_()
        mask = torch.randint(0, 2, (b, n, n), device="cuda").float() if masked else torch.ones(b, n, n, device="cuda")
        lin = lambda o, i: torch.randn(o, i, device="cuda") / i**0.5
        p = {"norm_w": 1 + 0.2 * torch.randn(dim, device="cuda"), "norm_b": 0.2 * torch.randn(dim, device="cuda"),
             "left": lin(hidden, dim), "left_gate": lin(hidden, dim), "right": lin(hidden, dim), "right_gate": lin(hidden, dim),
             "out_gate": lin(hidden, dim), "out_norm_w": 1 + 0.2 * torch.randn(hidden, device="cuda"),
             "out_norm_b": 0.2 * torch.randn(hidden, device="cuda"), "out": lin(dim, hidden)}
        shape_s = f"{n}x{b}x{dim}"
        want = trimul_reference(x, mask, p)
        got = compiled(x, mask, p)
        if not torch.allclose(want, got, rtol=2e-2, atol=2e-2):
            print(f"warning: torch.compile trimul {shape_s} differs from eager", file=sys.stderr)
        del want, got
        for name, f in [("torch eager", trimul_reference), ("torch.compile", compiled)]:
            ms = time_ms(f, [x, mask, p])
            print(f"trimul {shape_s:>14} f32   {name:14} {ms:9.3f} ms", file=sys.stderr)
            rows.append({"op": "trimul", "shape": shape_s, "dtype": "f32", "impl": name, "median_ms": ms})
        del x, mask, p
        torch.cuda.empty_cache()
    return rows


def delta_rescaled(q, k, v, beta):
    """The delta rule of rustile's op (a per-head beta, the step
    (1 - exp(-beta * |k|^2)) / (|k|^2 + 1e-8)) as the standard one FLA runs:
    k/|k|, v/|k| and a per-token beta of 1 - exp(-beta * |k|^2) give the same
    states and outputs (with scale 1)."""
    lam = k.float().pow(2).sum(-1, keepdim=True)
    norm = lam.sqrt().clamp_min(1e-30)
    b = -torch.expm1(-beta.view(1, 1, -1) * lam.squeeze(-1))
    return q, (k.float() / norm).to(k.dtype), (v.float() / norm).to(v.dtype), b.to(k.dtype)


def timed_with_peak(f, warmup, rep):
    """The median time of f (ms) and its peak memory beyond what was allocated before it (GB)."""
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    f()
    peak = (torch.cuda.max_memory_allocated() - base) / 1e9
    return do_bench(f, warmup=warmup, rep=rep, return_mode="median"), peak


def delta_rule_rows(lengths, check_dir):
    """FLA's chunk_delta_rule and fused_recurrent_delta_rule (bf16, 8 heads of
    64, one sequence of T tokens) on rescaled inputs; first, on the inputs
    rustile-bench left in `check_dir`, FLA's output against ours."""
    import os
    try:
        from fla.ops.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule
    except ImportError as e:
        print(f"delta_rule: FLA not installed ({e}); no baseline", file=sys.stderr)
        return []
    rows, heads, d = [], 8, 64
    if check_dir and os.path.isdir(check_dir):
        import numpy as np
        raw = lambda name, dtype: torch.from_numpy(np.fromfile(os.path.join(check_dir, name), dtype=dtype).copy()).cuda()
        bf = lambda name: raw(name, "<i2").view(torch.bfloat16).view(1, -1, heads, d)
        q, k, v, ours = bf("q.bf16"), bf("k.bf16"), bf("v.bf16"), bf("o.bf16")
        beta = raw("beta.f32", "<f4")
        rel = lambda got, want: ((got.float() - want.float()).norm() / want.float().norm()).item()
        for name, fn in [("fla chunk", chunk_delta_rule), ("fla recurrent", fused_recurrent_delta_rule)]:
            o, _ = fn(*delta_rescaled(q, k, v, beta), scale=1.0)
            err = rel(o, ours)
            print(f"delta_rule check: {name} against rustile at T = {q.shape[1]}: rel err {err:.2e}"
                  + ("" if err < 2e-2 else "  MISMATCH"), file=sys.stderr)
        if os.path.exists(os.path.join(check_dir, "dq.bf16")):
            # The gradients through the rescaling too (autograd), against ours.
            leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
            o, _ = chunk_delta_rule(*delta_rescaled(*leaves), scale=1.0)
            o.backward(bf("do.bf16"))
            ours_g = [bf("dq.bf16"), bf("dk.bf16"), bf("dv.bf16"), raw("dbeta.f32", "<f4")]
            errs = [rel(x.grad, want) for x, want in zip(leaves, ours_g)]
            print("delta_rule check: fla chunk's gradients (through the rescaling) against rustile's: [dq, dk, dv, dbeta] rel err "
                  + ", ".join(f"{e:.2e}" for e in errs) + ("" if max(errs) < 5e-2 else "  MISMATCH"), file=sys.stderr)
    for t in [int(x) for x in lengths.split(",") if x]:
        shape_s = f"1x{t}x{heads}x{d}"
        q, k, v = (torch.randn(1, t, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        k = k / d**0.5
        args = delta_rescaled(q, k, v, torch.rand(heads, device="cuda") * 1.8 + 0.2)
        del q, k, v
        for name, fn, longest in [("fla chunk", chunk_delta_rule, None), ("fla recurrent", fused_recurrent_delta_rule, 65536)]:
            if longest is not None and t > longest:
                continue
            ms, peak = timed_with_peak(lambda: fn(*args, scale=1.0, output_final_state=True), 5, 50)
            print(f"delta_rule {shape_s:>16} bf16  {name:14} {ms:9.3f} ms {t / ms / 1e3:8.2f} M tokens/s  "
                  f"peak {peak:.2f} GB beyond the inputs", file=sys.stderr)
            rows.append({"op": "delta_rule", "shape": shape_s, "dtype": "bf16", "impl": name, "median_ms": ms,
                         "bytes": 4.0 * t * heads * d * 2})
        # Forward and backward under autograd, on the rescaled inputs as leaves
        # (the rescaling's own backward is left out: elementwise, and ours
        # includes the step size's).
        leaves = [x.detach().clone().requires_grad_() for x in args]
        d_o = torch.randn_like(args[0])

        def step():
            for x in leaves:
                x.grad = None
            o, _ = chunk_delta_rule(*leaves, scale=1.0)
            o.backward(d_o)
        ms, peak = timed_with_peak(step, 3, 30)
        print(f"delta_rule_fwd_bwd {shape_s:>16} bf16  fla chunk      {ms:9.3f} ms {t / ms / 1e3:8.2f} M tokens/s  "
              f"peak {peak:.2f} GB beyond the inputs", file=sys.stderr)
        rows.append({"op": "delta_rule_fwd_bwd", "shape": shape_s, "dtype": "bf16", "impl": "fla chunk", "median_ms": ms,
                     "bytes": 11.0 * t * heads * d * 2})
        del args, leaves, d_o
        torch.cuda.empty_cache()
    return rows


def quasar_rows(lengths):
    """QuasarAttention's layer (hidden 512, 8 heads of 64, B = 1) in PyTorch
    around FLA's chunk_delta_rule: the layer-equivalent of rustile's
    (rustile_train::quasar), under bf16 autocast as the seed's script runs it.
    The forward alone (under no_grad) and forward+backward, at each length."""
    try:
        from fla.ops.delta_rule import chunk_delta_rule
    except ImportError as e:
        print(f"quasar: FLA not installed ({e}); no baseline", file=sys.stderr)
        return []
    import torch.nn.functional as F
    hidden, heads, d, rank = 512, 8, 64, 64

    class Quasar(torch.nn.Module):
        def __init__(self):
            super().__init__()
            lin = lambda i, o, bias=False: torch.nn.Linear(i, o, bias=bias)
            self.q, self.k, self.v, self.o = lin(hidden, hidden), lin(hidden, hidden), lin(hidden, hidden), lin(hidden, hidden)
            self.g1, self.g2 = lin(hidden, rank), lin(rank, hidden, bias=True)
            self.convs = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(hidden, 1, 4) / 2) for _ in range(3)])
            self.beta_log = torch.nn.Parameter(torch.zeros(heads))
            self.norm_w = torch.nn.Parameter(torch.ones(d))

        def forward(self, x):
            t = x.shape[1]
            def short_conv(y, w):
                # Depthwise, causal, width 4, then SiLU.
                return F.silu(F.conv1d(F.pad(y.transpose(1, 2), (3, 0)), w.to(y.dtype), groups=hidden).transpose(1, 2))
            q, k, v = (short_conv(p(x), w).view(1, t, heads, d) for p, w in zip((self.q, self.k, self.v), self.convs))
            o, _ = chunk_delta_rule(*delta_rescaled(q, k, v, F.softplus(self.beta_log)), scale=1.0)
            g = self.g2(self.g1(x)).view(1, t, heads, d)
            of = o.float()
            y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + 1e-5) * self.norm_w * torch.sigmoid(g.float())
            return self.o(y.to(x.dtype).view(1, t, hidden))

    rows = []
    model = Quasar().cuda()
    for t in [int(x) for x in lengths.split(",") if x]:
        shape_s = f"1x{t}x{hidden}"
        x = torch.randn(1, t, hidden, device="cuda")
        dy = torch.randn(1, t, hidden, device="cuda", dtype=torch.bfloat16)

        def fwd():
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x)

        def step():
            model.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
            out.backward(dy)
        try:
            for name, f, op in [("torch+fla", fwd, "quasar"), ("torch+fla", step, "quasar_fwd_bwd")]:
                ms, peak = timed_with_peak(f, 3, 20)
                print(f"{op} {shape_s:>14} bf16  {name:10} {ms:9.3f} ms {t / ms / 1e3:8.2f} M tokens/s  "
                      f"peak {peak:.2f} GB beyond the inputs", file=sys.stderr)
                rows.append({"op": op, "shape": shape_s, "dtype": "bf16", "impl": name, "median_ms": ms})
        except torch.cuda.OutOfMemoryError as e:
            print(f"quasar {shape_s}: out of memory ({e})", file=sys.stderr)
        del x, dy
        torch.cuda.empty_cache()
    return rows


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
    p.add_argument("--attn", default="", help="attention shapes BxSqxSkxHxHkvxD, c appended for causal, comma-separated")
    p.add_argument("--trimul", default="", help="trimul shapes NxBxD, m appended if masked and c if x is Cauchy, comma-separated")
    p.add_argument("--delta", default="", help="delta-rule and QuasarAttention lengths (tokens), comma-separated")
    p.add_argument("--delta-check", default="", help="where rustile-bench left inputs and outputs for FLA's check")
    p.add_argument("--json", required=True)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baselines.py: torch sees no CUDA device")

    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    rows = []
    for op in [o for o in args.ops.split(",") if o]:
        if op == "attention":
            # Attention runs in bf16 (its benchmark's element type), whatever --dtype says.
            rows += attention_rows(args.attn, torch.bfloat16, "bf16")
            continue
        if op == "trimul":
            # fp32 in and out, whatever --dtype says.
            rows += trimul_rows(args.trimul)
            continue
        if op == "delta_rule":
            rows += delta_rule_rows(args.delta, args.delta_check)
            continue
        if op == "quasar":
            rows += quasar_rows(args.delta)
            continue
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
