//! Dual GEMM, the SwiGLU gate of an MLP: `C = silu(A·B₁ᵀ) ⊙ (A·B₂ᵀ)` with A
//! `[M, K]`, B₁ and B₂ `[N, K]` (the gate and up projections' weights) and
//! C `[M, N]`; bf16 or f16, f32 accumulation, any M, N, K.
//!
//! One kernel: each program streams its A tiles once against both weights,
//! keeps both accumulators on chip, and writes only C. Two GEMMs and an
//! activation would write and re-read two `[M, N]` intermediates. On
//! Hopper the kernel is `wgmma` fed by the copy engine
//! ([`mainloop_tma`](crate::gemm::mainloop_tma) with two B operands);
//! elsewhere `mma.sync` ([`mainloop2`](crate::gemm::mainloop2)).
use crate::gemm::{block, mainloop2};
use rustile::prelude::*;

#[kernel(
    // Two accumulators a program: the blocks are half as wide (or twice the
    // warps) as plain GEMM's at the same register budget.
    configs = [
        (BM = 64, BN = 64, BK = 32, WARPS = 4, STAGES = 3, SMEM = 36864),
        (BM = 128, BN = 64, BK = 32, WARPS = 4, STAGES = 4, SMEM = 65536),
        (BM = 128, BN = 64, BK = 64, WARPS = 4, STAGES = 3, SMEM = 98304),
        (BM = 128, BN = 128, BK = 32, WARPS = 8, STAGES = 4, SMEM = 98304),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 3, SMEM = 147456),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [bf16, f16],
)]
pub fn dual_gemm_kernel<T: Elem>(a: Ptr<T>, b1: Ptr<T>, b2: Ptr<T>, c: PtrMut<T>, m: usize, n: usize, k: usize) {
    let at = block::<BM, BN>(m, n);
    let (gate, up) = mainloop2::<T, BM, BN, BK, STAGES, THREADS>(a, [b1, b2], m, n, k, at);
    // Staged in the stages (from byte 0; `SMEM ≥ 4·BM·BN` in every config).
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &gate.zip(up, |g, u| math::silu(g) * u), 0, |_, _, x: [f32; 8]| x);
}

// `SMEM = pad(32·WARPS) + STAGES·((BM + 2·BN)·BK·2 + 16)`: a stage holds
// A's tile and both weights'. `COPIER = 1`: 128 more threads that only
// issue copies (`mainloop_tma_ws`), whose shared memory is sized for the
// multiplying threads.
#[kernel(
    configs = [
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 4, COPIER = 0, SMEM = 196672),
        (BM = 128, BN = 64, BK = 64, WARPS = 8, STAGES = 6, COPIER = 0, SMEM = 196704),
        (BM = 64, BN = 128, BK = 64, WARPS = 4, STAGES = 5, COPIER = 0, SMEM = 205392),
        (BM = 64, BN = 64, BK = 64, WARPS = 4, STAGES = 6, COPIER = 0, SMEM = 148064),
        (BM = 128, BN = 128, BK = 64, WARPS = 12, STAGES = 4, COPIER = 1, SMEM = 196672),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
/// [`dual_gemm_kernel`] on Hopper: `wgmma` with TMA copies. `map_a`,
/// `map_b1`, `map_b2` are the device addresses of the operands' tensor
/// maps (boxes of `BM×64`, `BN×64`); rows of `k` elements, `k` a multiple of 8.
pub fn dual_gemm_tma_kernel<T: Elem>(
    a: Ptr<T>, b1: Ptr<T>, b2: Ptr<T>, c: PtrMut<T>, m: usize, n: usize, k: usize, map_a: u64, map_b1: u64, map_b2: u64,
) {
    use crate::gemm::{mainloop_tma_cfg, pad, Mapped, Operand};
    let at = block::<BM, BN>(m, n);
    let op = |ptr: Ptr<T>, map: u64| Mapped { map, z: 0, op: Operand { ptr, ld: k } };
    let (a, b) = (op(a, map_a), [op(b1, map_b1), op(b2, map_b2)]);
    // The threads that multiply (and store): all of them, or all but the copy warpgroup.
    const TH: usize = THREADS - 128 * COPIER;
    let [gate, up] = mainloop_tma_cfg::<T, T, BM, BN, BK, STAGES, TH, 2, COPIER>(a, b, [m, n, k], at);
    // rcp.approx: a third of IEEE division's instructions, a few ulp of f32 before the 16-bit store.
    let h = gate.zip(up, |g, u| math::silu_fast(g) * u);
    store_acc_staged(&rustile::BlockPtr::<T, BM, BN, TH>::rows(c, m, n, at), &h, pad(TH), |_, _, x: [f32; 8]| x);
}

// ---- config choice and host API ----------------------------------------------------------

/// The config `dual_gemm` runs where the tuned table has no entry: 128×128
/// blocks (8 warps) when there are enough of them to fill the GPU's SMs
/// twice, else 64×64.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { 3 } else { 0 }
}

/// The config `dual_gemm` runs on Hopper where the tuned table has no
/// entry: the largest blocks (128×128 of each product, with a copy
/// warpgroup) that still give every SM one, else 128×64, else 64×64.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_tma_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 132 {
        4
    } else if cdiv(m, 128) * cdiv(n, 64) >= 132 {
        1
    } else {
        3
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
