//! GEMM on tensor cores: `C = A·Bᵀ` with A `[M, K]`, B `[N, K]` and C
//! `[M, N]`, all row-major (B is laid out as a linear layer's weight), bf16
//! or f16 in and out, f32 accumulation. Any M, N, K: edge tiles are masked,
//! and K need not be a multiple of BK (the masked columns load as zeros).
//!
//! Each program computes one `BM×BN` block of C. Its K loop stages the next
//! `BM×BK` and `BN×BK` tiles in registers while the tensor cores work on the
//! current ones in shared memory: load (k+1) → dot (k) → sync → store (k+1)
//! to shared → sync.
//!
//! This is the first `mma.sync` path: no `cp.async` pipeline and no fused
//! epilogue yet (issue 3 continues there).
use rustile::prelude::*;

// ---- kernel ------------------------------------------------------------------------------

/// C = A·Bᵀ for one `BM×BN` block of C per program.
#[kernel(
    configs = [
        (BM = 64, BN = 64, BK = 32, WARPS = 4, SMEM = 8192),
        (BM = 128, BN = 128, BK = 32, WARPS = 4, SMEM = 16384),
        (BM = 128, BN = 256, BK = 32, WARPS = 8, SMEM = 24576),
    ],
    grid = [cdiv(m, BM), cdiv(n, BN)],
    dtypes = [bf16, f16],
)]
pub fn gemm_nt_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, m: usize, n: usize, k: usize) {
    let (r0, c0) = (program_id(0) * BM, program_id(1) * BN);
    let mut pa = BlockPtr::<T, BM, BK>::rows(a, m, k, [r0, 0]);
    let mut pb = BlockPtr::<T, BN, BK>::rows(b, n, k, [c0, 0]);
    let mut sa = Shared::<T, BM, BK>::at(0);
    let mut sb = Shared::<T, BN, BK>::at(BM * BK * 2);
    let mut acc = Acc::<BM, BN>::zeros();

    let (mut ta, mut tb) = (load(&pa), load(&pb));
    sa.store(&ta);
    sb.store(&tb);
    sync();
    let mut k0 = 0;
    while k0 < k {
        let more = k0 + BK < k;
        if more {
            pa = pa.advance([0, BK]);
            pb = pb.advance([0, BK]);
            ta = load(&pa);
            tb = load(&pb);
        }
        acc = dot(&sa, &sb, acc);
        sync();
        if more {
            sa.store(&ta);
            sb.store(&tb);
        }
        sync();
        k0 += BK;
    }
    store_acc(&BlockPtr::<T, BM, BN>::rows(c, m, n, [r0, c0]), &acc);
}

// ---- config choice and host API ----------------------------------------------------------

/// The config `gemm_nt` runs: 128×128 blocks when there are enough of them to
/// fill the GPU's SMs twice, else 64×64 (the autotuner replaces this rule).
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { 1 } else { 0 }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::{expect_shape, matrix};
    use rustile_host::{Error, Gpu, Result, Tensor};

    fn check_dtype<T: Elem>() -> Result<()> {
        if core::mem::size_of::<T>() != 2 || T::NAME.starts_with("f8") {
            return Err(Error::DType(format!("gemm_nt takes bf16 or f16 operands, not {}", T::NAME)));
        }
        Ok(())
    }

    /// `c = a·bᵀ` on the GPU: `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]`.
    pub fn gemm_nt<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        check_dtype::<T>()?;
        let (m, k) = matrix("a", a)?;
        let (n, kb) = matrix("b", b)?;
        if kb != k {
            return Err(Error::Shape(format!("a is [{m}, {k}] and b is [{n}, {kb}]: their inner dimensions differ")));
        }
        expect_shape("c", c, &[m, n])?;
        gemm_nt_kernel::launch(gpu, default_config(m, n), a, b, c, m, n, k)
    }

    /// `a·bᵀ` in the CPU interpreter (`a` `[m, k]`, `b` `[n, k]`, row-major).
    pub fn gemm_nt_cpu<T: Elem>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
        assert_eq!(a.len(), m * k, "gemm_nt: a holds {} elements, not {m}×{k}", a.len());
        assert_eq!(b.len(), n * k, "gemm_nt: b holds {} elements, not {n}×{k}", b.len());
        let mut c = vec![T::default(); m * n];
        gemm_nt_kernel::cpu(default_config(m, n), a, b, &mut c, m, n, k);
        c
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
