//! The host API of the dual GEMM. Host-only: editing it changes no kernel
//! and leaves tuned tables current.
use super::*;
use crate::check::expect_shape;
use crate::gemm::{check_dtype, gemm_shape, block_shape, tma_map, Config};
use rustile_host::{Error, Gpu, Result, Tensor};

/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` on the GPU: `a` `[m, k]`, `b1` and `b2` `[n, k]`, `c` `[m, n]`.
pub fn dual_gemm<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b1: &Tensor<T>, b2: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
    let (m, n, k) = gemm_shape(a, b1, c)?;
    dual_gemm_with_config(gpu, choose(gpu, m, n, k), a, b1, b2, c)
}

/// The config `dual_gemm` runs where none is given: on Hopper, with rows of
/// 16-byte multiples (`k % 8 == 0`), the TMA kernel; else `mma.sync`. Each
/// from its tuned table (`dual_gemm_tma`, `dual_gemm`), else its default.
pub fn choose(gpu: &Gpu, m: usize, n: usize, k: usize) -> Config {
    if dual_gemm_tma_kernel::supported(gpu) && k % 8 == 0 {
        return Config::Tma(crate::tune::config(gpu.compute_capability(), "dual_gemm_tma", dual_gemm_tma_kernel::CONFIGS, &[m, n, k], || default_tma_config(m, n)));
    }
    Config::Mma(choose_mma(gpu, m, n, k))
}

/// The `mma.sync` config `dual_gemm` runs on a GPU without `wgmma` (tuned, else the default).
pub fn choose_mma(gpu: &Gpu, m: usize, n: usize, k: usize) -> usize {
    crate::tune::config(gpu.compute_capability(), "dual_gemm", dual_gemm_kernel::CONFIGS, &[m, n, k], || default_config(m, n))
}

/// `dual_gemm` with config `cfg`: a plain index is one of
/// `dual_gemm_kernel::CONFIGS` (`mma.sync`), `Config::Tma(i)` one of
/// `dual_gemm_tma_kernel::CONFIGS` (for tests, sweeps and the tuner).
pub fn dual_gemm_with_config<T: Elem>(gpu: &Gpu, cfg: impl Into<Config>, a: &Tensor<T>, b1: &Tensor<T>, b2: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
    check_dtype::<T>("dual_gemm")?;
    let (m, n, k) = gemm_shape(a, b1, c)?;
    if b2.shape() != b1.shape() {
        return Err(Error::Shape(format!("b1 is {:?} but b2 is {:?}: the two weights must match", b1.shape(), b2.shape())));
    }
    expect_shape("b2", b2, &[n, k])?;
    match cfg.into() {
        Config::Mma(cfg) => dual_gemm_kernel::launch(gpu, cfg, a, b1, b2, c, m, n, k),
        Config::Tma(cfg) if k % 8 == 0 => {
            let [bm, bn] = block_shape("dual_gemm_tma_kernel", dual_gemm_tma_kernel::CONFIGS, cfg)?;
            let map = |t: &Tensor<T>, rows: usize, box_rows: usize| tma_map(gpu, t, [k, rows, 1], [k, k * rows], box_rows);
            let (ma, mb1, mb2) = (map(a, m, bm)?, map(b1, n, bn)?, map(b2, n, bn)?);
            dual_gemm_tma_kernel::launch(gpu, cfg, a, b1, b2, c, m, n, k, ma, mb1, mb2)
        }
        Config::Tma(_) => Err(Error::Shape(format!("dual_gemm: the TMA kernel reads rows of k = {k} elements; it needs k a multiple of 8"))),
        Config::Wgmma(_) => Err(Error::Shape("dual_gemm on Hopper is Config::Tma (there is no cp.async wgmma dual kernel)".into())),
    }
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
