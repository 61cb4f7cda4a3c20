//! GEMM on tensor cores: `C = A·Bᵀ` with A `[M, K]`, B `[N, K]` and C
//! `[M, N]`, all row-major (B is laid out as a linear layer's weight), bf16
//! or f16 in and out, f32 accumulation. Any M, N, K: edge tiles are masked,
//! and K need not be a multiple of BK (the masked columns load as zeros).
//!
//! Each program computes one `BM×BN` block of C. Its K loop is a `cp.async`
//! pipeline `STAGES` deep: global → shared copies run `STAGES − 1` k-steps
//! ahead of the tensor cores, with one barrier a step.
//!
//! No fused epilogue yet (issue 3 continues there).
use rustile::prelude::*;

// ---- kernel ------------------------------------------------------------------------------

/// Block rows per band of the launch order (see `rustile::grouped`): 16 rows
/// of 128 keep a wave of 264 programs on about 16 + 17 operand panels.
const GROUP: usize = 16;

/// C = A·Bᵀ for one `BM×BN` block of C per program.
#[kernel(
    configs = [
        (BM = 64, BN = 64, BK = 32, WARPS = 4, STAGES = 3, SMEM = 24576),
        (BM = 128, BN = 128, BK = 32, WARPS = 4, STAGES = 4, SMEM = 65536),
        (BM = 128, BN = 128, BK = 64, WARPS = 4, STAGES = 3, SMEM = 98304),
        (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 3, SMEM = 147456),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [bf16, f16],
)]
pub fn gemm_nt_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, m: usize, n: usize, k: usize) {
    let [bm, bn] = grouped(program_id(0), cdiv(m, BM), cdiv(n, BN), GROUP);
    let (r0, c0) = (bm * BM, bn * BN);
    let pa = |kt: usize| BlockPtr::<T, BM, BK>::rows(a, m, k, [r0, kt * BK]);
    let pb = |kt: usize| BlockPtr::<T, BN, BK>::rows(b, n, k, [c0, kt * BK]);
    // Stage s holds A then B of one k-step.
    let stage = |kt: usize| {
        let at = (kt % STAGES) * (BM + BN) * BK * 2;
        (Shared::<T, BM, BK>::at(at), Shared::<T, BN, BK>::at(at + BM * BK * 2))
    };
    let steps = cdiv(k, BK);

    // Fill all stages but one; every step then starts the copy STAGES − 1
    // steps ahead into the stage the previous step finished with.
    for kt in 0..STAGES - 1 {
        if kt < steps {
            let (sa, sb) = stage(kt);
            sa.copy_from(&pa(kt));
            sb.copy_from(&pb(kt));
        }
        commit_copies();
    }
    let mut acc = Acc::<BM, BN>::zeros();
    for kt in 0..steps {
        wait_copies::<{ STAGES as u32 - 2 }>();
        sync(); // step kt's stage is complete for everyone, and step kt−1's is free
        let (sa, sb) = stage(kt);
        acc = dot(&sa, &sb, acc);
        // Issued after the tensor-core work, so that each step starts reading
        // its operands right after the barrier; the copies then overlap the
        // MMAs still in flight.
        let ahead = kt + STAGES - 1;
        if ahead < steps {
            let (sa, sb) = stage(ahead);
            sa.copy_from(&pa(ahead));
            sb.copy_from(&pb(ahead));
        }
        commit_copies();
    }
    store_acc(&BlockPtr::<T, BM, BN>::rows(c, m, n, [r0, c0]), &acc);
}

// ---- config choice and host API ----------------------------------------------------------

/// The config `gemm_nt` runs: 128×128 blocks when there are enough of them to
/// fill the GPU's SMs twice, else 64×64 (the autotuner replaces this rule).
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { 2 } else { 0 }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::{expect_shape, matrix};
    use rustile_host::{Error, Gpu, Result, Tensor};

    fn check_dtype<T: Elem>() -> Result<()> {
        if !matches!(T::KIND, Kind::Bf16 | Kind::F16) {
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
