//! The host API of the dual GEMM. Host-only: editing it changes no kernel
//! and leaves tuned tables current.
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
