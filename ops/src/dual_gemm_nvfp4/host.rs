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
    let [m, n, k] = product_shape("dual_gemm_nvfp4", a, b1, c)?;
    let cfg = crate::tune::config(gpu.compute_capability(), "dual_gemm_nvfp4", dual_gemm_nvfp4_kernel::CONFIGS, &[m, n, k], || default_config(m, n));
    dual_gemm_nvfp4_with_config(gpu, cfg, a, b1, b2, c)
}

/// The config where the tuned table has none: the one there is (128×64).
pub fn default_config(_m: usize, _n: usize) -> usize {
    0
}

/// [`dual_gemm_nvfp4`] with config `cfg` of `dual_gemm_nvfp4_kernel::CONFIGS`.
pub fn dual_gemm_nvfp4_with_config(gpu: &Gpu, cfg: usize, a: Nvfp4, b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, k] = product_shape("dual_gemm_nvfp4", a, b1, c)?;
    if b2.dims("b2")? != [n, k] {
        return Err(Error::Shape(format!("dual_gemm_nvfp4: b1 is {n}×{k} values, b2 {:?} bytes: b1 and b2 must be alike", b2.values.shape())));
    }
    if m * n == 0 {
        return Ok(());
    }
    let (wa, wb1, wb2) = (a.words([m, k])?, b1.words([n, k])?, b2.words([n, k])?);
    dual_gemm_nvfp4_kernel::launch(gpu, cfg, &wa, a.scales, &wb1, b1.scales, &wb2, b2.scales, c, m, n, k)
}

/// `[m, n, k]` of `c = a·bᵀ`, or the error naming what does not fit.
fn product_shape(op: &str, a: Nvfp4, b: Nvfp4, c: &Tensor<f16>) -> Result<[usize; 3]> {
    let ([m, k], [n, kb]) = (a.dims("a")?, b.dims("b")?);
    if kb != k {
        return Err(Error::Shape(format!("{op}: a is {m}×{k} values, b {n}×{kb}: they must share k")));
    }
    expect_shape("c", c, &[m, n])?;
    Ok([m, n, k])
}

/// `c = a·bᵀ` of NVFP4 operands, fp16 out: `a` `m × k`, `b` `n × k`, `c`
/// `[m, n]`; any `m` and `n`, `k` a multiple of 64.
pub fn gemm_nvfp4(gpu: &Gpu, a: Nvfp4, b: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, _] = product_shape("gemm_nvfp4", a, b, c)?;
    let cfg = if cdiv(m, 128) * cdiv(n, 128) >= 132 {
        2
    } else if cdiv(m, 128) * cdiv(n, 64) >= 132 {
        1
    } else {
        0
    };
    gemm_nvfp4_with_config(gpu, cfg, a, b, c)
}

/// [`gemm_nvfp4`] with config `cfg` of `gemm_nvfp4_kernel::CONFIGS`.
pub fn gemm_nvfp4_with_config(gpu: &Gpu, cfg: usize, a: Nvfp4, b: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, k] = product_shape("gemm_nvfp4", a, b, c)?;
    if m * n == 0 {
        return Ok(());
    }
    gemm_nvfp4_kernel::launch(gpu, cfg, &a.words([m, k])?, a.scales, &b.words([n, k])?, b.scales, c, m, n, k)
}
