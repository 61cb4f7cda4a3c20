//! The host API of the NVFP4 dual GEMM. Host-only: editing it changes no
//! kernel and leaves tuned tables current.
use super::*;
use crate::check::expect_shape;
use crate::nvfp4::Nvfp4;
use rustile_host::{Error, Gpu, Result, Tensor};

/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` of NVFP4 operands, fp16 out: `a` `m × k`,
/// `b1` and `b2` `n × k`, `c` `[m, n]`; any `m` and `n`, `k` a multiple of 64.
///
/// ```ignore
/// let a = Nvfp4 { values: &a_fp4, scales: &a_scales };
/// dual_gemm_nvfp4(&gpu, a, Nvfp4 { values: &w1, scales: &s1 }, Nvfp4 { values: &w2, scales: &s2 }, &mut c)?;
/// ```
pub fn dual_gemm_nvfp4(gpu: &Gpu, a: Nvfp4, b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, _] = a.dims("a")?;
    let [n, _] = b1.dims("b1")?;
    let cfg = crate::tune::config(gpu.compute_capability(), "dual_gemm_nvfp4", dual_gemm_nvfp4_kernel::CONFIGS, &[m, n, 2 * a.values.shape()[1]], || default_config(m, n));
    dual_gemm_nvfp4_with_config(gpu, cfg, a, b1, b2, c)
}

/// The config where the tuned table has none: 128×64 blocks when they give
/// every SM of an H100 one, else 64×64.
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 64) >= 132 { 1 } else { 0 }
}

/// [`dual_gemm_nvfp4`] with config `cfg` of `dual_gemm_nvfp4_kernel::CONFIGS`.
pub fn dual_gemm_nvfp4_with_config(gpu: &Gpu, cfg: usize, a: Nvfp4, b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, k] = a.dims("a")?;
    let [n, kb] = b1.dims("b1")?;
    if b2.dims("b2")? != [n, kb] || kb != k {
        return Err(Error::Shape(format!(
            "dual_gemm_nvfp4: a is {m}×{k}, b1 {n}×{kb}, b2 {:?} values: b1 and b2 must be n×k with a's k",
            b2.values.shape()
        )));
    }
    expect_shape("c", c, &[m, n])?;
    if m * n == 0 {
        return Ok(());
    }
    let (wa, wb1, wb2) = (a.words([m, k])?, b1.words([n, k])?, b2.words([n, k])?);
    dual_gemm_nvfp4_kernel::launch(gpu, cfg, &wa, a.scales, &wb1, b1.scales, &wb2, b2.scales, c, m, n, k)
}

