"""How fast can an `mma.sync` GEMM go on this GPU? Triton's, as a reference.

Issue 3 asks for the `mma.sync` path at 70 % of cuBLAS on the H100. This
times a plain Triton GEMM (C = A·Bᵀ, A [M, K], B [N, K], bf16 in, f32
accumulation, bf16 out) over a few tile configs, once as Triton compiles it
for Hopper (`wgmma`) and once with `DISABLE_MMA_V3=1` (Triton's switch back to
the Ampere `mma.sync` instructions), beside torch's cuBLAS, at the bench's
square shapes. The PTX of each build is checked for the instruction it was
meant to use, so a run that silently ignored the switch says so.

Usage on the GPU machine: `python3 bench/probes/triton_mma_sync.py [--mma-v2]`
(run it twice: the switch is read when Triton compiles, so one process
measures one path).
"""
import argparse
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def gemm_nt(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    # Grouped launch order, as our kernels do: GROUP block rows per band.
    pid = tl.program_id(0)
    rows, cols = tl.cdiv(M, BM), tl.cdiv(N, BN)
    band = pid // (GROUP * cols)
    first = band * GROUP
    height = tl.minimum(rows - first, GROUP)
    bm = first + (pid % (GROUP * cols)) % height
    bn = (pid % (GROUP * cols)) // height
    ra = bm * BM + tl.arange(0, BM)
    rb = bn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + ra[:, None] * K + rk[None, :]
    pb = b + rb[:, None] * K + rk[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        x = tl.load(pa, mask=(ra[:, None] < M) & (rk[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(rb[:, None] < N) & (rk[None, :] < left), other=0.0)
        acc = tl.dot(x, tl.trans(y), acc)
        pa += BK
        pb += BK
    pc = c + ra[:, None] * N + rb[None, :]
    tl.store(pc, acc.to(tl.bfloat16), mask=(ra[:, None] < M) & (rb[None, :] < N))


# (BM, BN, BK, warps, stages): the shapes CUTLASS's and Triton's Ampere GEMMs use.
CONFIGS = [
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (128, 256, 32, 8, 4),
    (64, 256, 32, 4, 4),
]


def run(m, n, k, cfg):
    bm, bn, bk, warps, stages = cfg
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    compiled = gemm_nt[grid](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, GROUP=16, num_warps=warps, num_stages=stages)
    want = (a.float() @ b.float().T)
    err = ((c.float() - want).abs().max() / want.abs().max()).item()
    if err > 2e-2:
        sys.exit(f"config {cfg} at {m}x{n}x{k}: wrong result (max rel err {err:.2e})")
    ptx = compiled.asm["ptx"]
    used = "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else "neither"
    ms = triton.testing.do_bench(lambda: gemm_nt[grid](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, GROUP=16, num_warps=warps, num_stages=stages), return_mode="median")
    return ms, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mma-v2", action="store_true", help="compile with DISABLE_MMA_V3=1 (mma.sync)")
    args = ap.parse_args()
    if args.mma_v2:
        os.environ["DISABLE_MMA_V3"] = "1"
    want = "mma.sync" if args.mma_v2 else "wgmma"
    print(f"{torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}, path {want}")
    for s in (4096, 8192):
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        flops = 2 * s**3
        cublas = triton.testing.do_bench(lambda: a @ b.T, return_mode="median")
        print(f"{s}^3 cuBLAS (torch): {cublas * 1e3:.1f} us, {flops / cublas / 1e9:.1f} TFLOP/s")
        for cfg in CONFIGS:
            try:
                ms, used = run(s, s, s, cfg)
            except Exception as e:  # a config Triton cannot build (shared memory) is skipped, said so
                print(f"  {cfg}: not run ({type(e).__name__}: {str(e).splitlines()[0][:80]})")
                continue
            note = "" if used == want else f"  (compiled to {used}, not {want})"
            print(f"  {cfg}: {ms * 1e3:.1f} us, {flops / ms / 1e9:.1f} TFLOP/s, {cublas / ms:.2f}x cuBLAS{note}")


if __name__ == "__main__":
    main()
