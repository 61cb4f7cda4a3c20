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
mod host {
    use super::*;
    use crate::check::expect_shape;
    use crate::gemm::{check_dtype, gemm_shape};
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` on the GPU: `a` `[m, k]`, `b1` and `b2` `[n, k]`, `c` `[m, n]`.
    pub fn dual_gemm<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b1: &Tensor<T>, b2: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        let (m, n, k) = gemm_shape(a, b1, c)?;
        let cfg = crate::tune::config(gpu.compute_capability(), "dual_gemm", dual_gemm_kernel::CONFIGS, &[m, n, k], || default_config(m, n));
        dual_gemm_with_config(gpu, cfg, a, b1, b2, c)
    }

    /// `dual_gemm` with config `cfg` of `dual_gemm_kernel::CONFIGS` (for tests, sweeps and the tuner).
    pub fn dual_gemm_with_config<T: Elem>(gpu: &Gpu, cfg: usize, a: &Tensor<T>, b1: &Tensor<T>, b2: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        check_dtype::<T>("dual_gemm")?;
        let (m, n, k) = gemm_shape(a, b1, c)?;
        if b2.shape() != b1.shape() {
            return Err(Error::Shape(format!("b1 is {:?} but b2 is {:?}: the two weights must match", b1.shape(), b2.shape())));
        }
        expect_shape("b2", b2, &[n, k])?;
        dual_gemm_kernel::launch(gpu, cfg, a, b1, b2, c, m, n, k)
    }

    /// `silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` in the CPU interpreter (row-major slices).
    pub fn dual_gemm_cpu<T: Elem>(a: &[T], b1: &[T], b2: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
        assert_eq!(a.len(), m * k, "dual_gemm: a holds {} elements, not {m}×{k}", a.len());
        for (what, b) in [("b1", b1), ("b2", b2)] {
            assert_eq!(b.len(), n * k, "dual_gemm: {what} holds {} elements, not {n}×{k}", b.len());
        }
        let mut c = vec![T::default(); m * n];
        dual_gemm_kernel::cpu(default_config(m, n), a, b1, b2, &mut c, m, n, k);
        c
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
