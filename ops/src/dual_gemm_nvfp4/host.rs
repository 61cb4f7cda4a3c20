//! The host API of the NVFP4 dual GEMM. Host-only: editing it changes no
//! kernel and leaves tuned tables current.
use super::*;
use crate::check::expect_shape;
use crate::nvfp4::Nvfp4;
use rustile_host::{Error, Gpu, Result, Tensor};

/// Which kernel runs the dual GEMM, and its config: the Hopper kernel
/// (`dual_gemm_nvfp4_wgmma_kernel`, B widened in registers, after A is
/// decoded to fp16 once) or the portable one (`dual_gemm_nvfp4_kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    Wgmma(usize),
    Mma(usize),
}

impl Config {
    /// Every config `gpu` can run, the Hopper kernel's first.
    pub fn all(gpu: &Gpu) -> Vec<Config> {
        let hopper = (0..dual_gemm_nvfp4_wgmma_kernel::CONFIGS.len()).map(Config::Wgmma).filter(|_| dual_gemm_nvfp4_wgmma_kernel::supported(gpu));
        hopper.chain((0..dual_gemm_nvfp4_kernel::CONFIGS.len()).map(Config::Mma)).collect()
    }

    /// The config's block and warps, for messages and the bench.
    pub fn describe(self) -> String {
        let (name, c) = match self {
            Config::Wgmma(i) => ("wgmma", &dual_gemm_nvfp4_wgmma_kernel::CONFIGS[i]),
            Config::Mma(i) => ("mma", &dual_gemm_nvfp4_kernel::CONFIGS[i]),
        };
        format!("{name} {}", c.name)
    }
}

/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` of NVFP4 operands, fp16 out: `a` `m × k`,
/// `b1` and `b2` `n × k`, `c` `[m, n]`; any `m` and `n`, `k` a multiple of 64.
///
/// ```ignore
/// let a = Nvfp4 { values: &a_fp4, scales: &a_scales };
/// dual_gemm_nvfp4(&gpu, a, Nvfp4 { values: &w1, scales: &s1 }, Nvfp4 { values: &w2, scales: &s2 }, &mut c)?;
/// ```
pub fn dual_gemm_nvfp4(gpu: &Gpu, a: Nvfp4, b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, _] = product_shape("dual_gemm_nvfp4", a, b1, c)?;
    dual_gemm_nvfp4_with_config(gpu, default_config(gpu, m, n), a, b1, b2, c)
}

/// The config for `m × n` on `gpu`: on Hopper the widening kernel (64
/// weight rows by 64 rows of A a program, three programs an SM: the
/// fastest or within 3 % at GPU MODE's four shapes, RESULTS "The NVFP4 dual
/// GEMM with B widened in registers"); elsewhere the portable kernel.
pub fn default_config(gpu: &Gpu, _m: usize, _n: usize) -> Config {
    if !dual_gemm_nvfp4_wgmma_kernel::supported(gpu) {
        return Config::Mma(0);
    }
    Config::Wgmma(1)
}

/// [`dual_gemm_nvfp4`] with config `cfg`.
pub fn dual_gemm_nvfp4_with_config(gpu: &Gpu, cfg: Config, a: Nvfp4, b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, k] = product_shape("dual_gemm_nvfp4", a, b1, c)?;
    if b2.dims("b2")? != [n, k] {
        return Err(Error::Shape(format!("dual_gemm_nvfp4: b1 is {n}×{k} values, b2 {:?} bytes: b1 and b2 must be alike", b2.values.shape())));
    }
    if m * n == 0 {
        return Ok(());
    }
    let (wa, wb1, wb2) = (a.words([m, k])?, b1.words([n, k])?, b2.words([n, k])?);
    let cfg = match cfg {
        Config::Mma(cfg) => return dual_gemm_nvfp4_kernel::launch(gpu, cfg, &wa, a.scales, &wb1, b1.scales, &wb2, b2.scales, c, m, n, k),
        Config::Wgmma(cfg) => cfg,
    };
    for (what, w) in [("b1", &wb1), ("b2", &wb2)] {
        // One 8-byte copy a run of 16 values.
        if w.device_ptr() % 8 != 0 {
            return Err(Error::Misaligned(format!("dual_gemm_nvfp4: {what}'s values must start 8-byte aligned for the Hopper kernel (they start at {:#x})", w.device_ptr())));
        }
    }
    let [bm, _] = crate::gemm::block_shape("dual_gemm_nvfp4_wgmma_kernel", dual_gemm_nvfp4_wgmma_kernel::CONFIGS, cfg)?;
    // A, the small operand, decoded once in the order the widened B's registers take K in.
    let mut a16 = gpu.alloc::<f16>(&[m, k])?;
    crate::nvfp4::nvfp4_dequantize_runs_kernel::launch(gpu, 0, &wa, a.scales, &mut a16, m, k)?;
    let map_a = crate::gemm::tma_map(gpu, &a16, [k, m, 1], [k, m * k], bm)?;
    let (s1, s2) = (b1.scales.view_as::<u32>(&[n, k / 64])?, b2.scales.view_as::<u32>(&[n, k / 64])?);
    dual_gemm_nvfp4_wgmma_kernel::launch(gpu, cfg, &a16, &wb1, &s1, &wb2, &s2, c, m, n, k, map_a)
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
