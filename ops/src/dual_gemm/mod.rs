//! Dual GEMM, the SwiGLU gate of an MLP: `C = silu(A·B₁ᵀ) ⊙ (A·B₂ᵀ)` with A
//! `[M, K]`, B₁ and B₂ `[N, K]` (the gate and up projections' weights) and
//! C `[M, N]`; bf16 or f16, f32 accumulation, any M, N, K.
//!
//! One kernel: each program streams its A tiles once against both weights
//! ([`mainloop2`](crate::gemm::mainloop2)), keeps both accumulators on
//! chip, and writes only C. Two GEMMs and an activation would write and
//! re-read two `[M, N]` intermediates.
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
    store_acc(&BlockPtr::rows(c, m, n, at), &gate.zip(up, |g, u| math::silu(g) * u));
}

// ---- config choice and host API ----------------------------------------------------------

/// The config `dual_gemm` runs where the tuned table has no entry: 128×128
/// blocks (8 warps) when there are enough of them to fill the GPU's SMs
/// twice, else 64×64.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { 3 } else { 0 }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
