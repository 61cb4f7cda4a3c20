//! The host API of the NVFP4 dual GEMM. Host-only: editing it changes no
//! kernel and leaves tuned tables current.
use super::*;
use crate::check::expect_shape;
use crate::nvfp4::Nvfp4;
use rustile_host::{Error, Gpu, Result, Tensor, TileMap};

/// Which kernel runs the dual GEMM, and its config: on Hopper the
/// warp-specialized one (`dual_gemm_nvfp4_ws_kernel`: A decoded to fp16
/// once a call, warpgroups widen B into shared memory), or the portable one
/// (`dual_gemm_nvfp4_kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    Ws(usize),
    Mma(usize),
}

impl Config {
    /// Every config `gpu` can run, the Hopper kernel's first.
    pub fn all(gpu: &Gpu) -> Vec<Config> {
        let ws = (0..dual_gemm_nvfp4_ws_kernel::CONFIGS.len()).map(Config::Ws).filter(|_| dual_gemm_nvfp4_ws_kernel::supported(gpu));
        ws.chain((0..dual_gemm_nvfp4_kernel::CONFIGS.len()).map(Config::Mma)).collect()
    }

    /// The config's block and warps, for messages and the bench.
    pub fn describe(self) -> String {
        let (name, c) = match self {
            Config::Ws(i) => ("ws", &dual_gemm_nvfp4_ws_kernel::CONFIGS[i]),
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
    let [m, n, k] = product_shape("dual_gemm_nvfp4", a, b1, c)?;
    dual_gemm_nvfp4_with_config(gpu, choose(gpu, m, n, k), a, b1, b2, c)
}

/// The config `dual_gemm_nvfp4` runs at `m × n × k` on `gpu`: on Hopper the
/// warp-specialized kernel's winner in the tuned table (op
/// `dual_gemm_nvfp4`), else [`default_config`]; elsewhere the portable kernel.
pub fn choose(gpu: &Gpu, m: usize, n: usize, k: usize) -> Config {
    if !dual_gemm_nvfp4_ws_kernel::supported(gpu) {
        return Config::Mma(0);
    }
    Config::Ws(crate::tune::config(gpu.compute_capability(), "dual_gemm_nvfp4", dual_gemm_nvfp4_ws_kernel::CONFIGS, &[m, n, k], default_config))
}

/// The untuned choice of `dual_gemm_nvfp4_ws_kernel`'s config: 64 weight
/// rows by 128 rows of A a program, one widening and one copy warpgroup
/// (RESULTS "The NVFP4 dual GEMM with a widening warpgroup": the fastest at
/// GPU MODE's four shapes).
pub fn default_config() -> usize {
    let i = dual_gemm_nvfp4_ws_kernel::CONFIGS.iter().position(|c| [("BN", 64), ("BM", 128), ("WIDENERS", 1), ("COPIER", 1)].iter().all(|&(k, v)| c.get(k) == Some(v)));
    i.expect("dual_gemm_nvfp4_ws_kernel has the default's config")
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
    match cfg {
        Config::Mma(cfg) => dual_gemm_nvfp4_kernel::launch(gpu, cfg, &wa, a.scales, &wb1, b1.scales, &wb2, b2.scales, c, m, n, k),
        Config::Ws(cfg) => widened_once(gpu, cfg, (&wa, a.scales), b1, b2, c, [m, n, k]),
    }
}

/// [`Config::Ws`]: [`ws_operands`], then the warp-specialized kernel.
fn widened_once(
    gpu: &Gpu, cfg: usize, a: (&Tensor<u32>, &Tensor<F8E4M3>), b1: Nvfp4, b2: Nvfp4, c: &mut Tensor<f16>, [m, n, k]: [usize; 3],
) -> Result<()> {
    let block = crate::gemm::block_shape("dual_gemm_nvfp4_ws_kernel", dual_gemm_nvfp4_ws_kernel::CONFIGS, cfg)?;
    let (a16, map_a, [(s1, map_b1, map_s1), (s2, map_b2, map_s2)]) = ws_operands(gpu, block, a, [b1, b2], [m, n, k])?;
    dual_gemm_nvfp4_ws_kernel::launch(gpu, cfg, &a16, b1.values, &s1, b2.values, &s2, c, m, n, k, map_a, map_b1, map_s1, map_b2, map_s2)
}

/// What the warp-specialized kernels read, for a program of `bm` rows of A
/// and `bn` weight rows: A decoded to fp16 in the order of
/// `chunk_k_position` and its map; each B's scales in cuBLAS's blocked
/// layout with the maps of its codes and of those scales (all once a call,
/// inside its time).
fn ws_operands<const P: usize>(
    gpu: &Gpu, [bm, bn]: [usize; 2], (wa, sa): (&Tensor<u32>, &Tensor<F8E4M3>), bs: [Nvfp4; P], [m, n, k]: [usize; 3],
) -> Result<(Tensor<f16>, u64, [(Tensor<F8E4M3>, u64, u64); P])> {
    // A, the small operand: its rows are read by every program of a block column.
    let mut a16 = gpu.alloc::<f16>(&[m, k])?;
    crate::nvfp4::nvfp4_dequantize_chunks_kernel::launch(gpu, 0, wa, sa, &mut a16, m, k)?;
    let map_a = crate::gemm::tma_map(gpu, &a16, [k, m, 1], [k, m * k], bm)?;
    let blocked_len = crate::nvfp4::blocked_len(n, k);
    let rows = (blocked_len / 128) as u64;
    // Codes as rows of bytes, boxes of one step (32 bytes) of `bn` rows;
    // scales as rows of 128 bytes, boxes of one atom (4 rows).
    let one = |b: Nvfp4| -> Result<(Tensor<F8E4M3>, u64, u64)> {
        let mut s = gpu.alloc::<F8E4M3>(&[blocked_len])?;
        crate::nvfp4::scales_to_blocked(gpu, b, &mut s)?;
        let codes = TileMap { base: b.values.device_ptr(), dims: [k as u64 / 2, n as u64, 1], strides: [k as u64 / 2, (k / 2 * n) as u64], boxes: [32, bn as u32, 1], elem_bytes: 1 };
        let scales = TileMap { base: s.device_ptr(), dims: [128, rows, 1], strides: [128, 128 * rows], boxes: [128, 4, 1], elem_bytes: 1 };
        let maps = (gpu.tensor_map(&codes)?, gpu.tensor_map(&scales)?);
        Ok((s, maps.0, maps.1))
    };
    let mut made = Vec::with_capacity(P);
    for b in bs {
        made.push(one(b)?);
    }
    let made: [_; P] = made.try_into().unwrap_or_else(|_| unreachable!("one a matrix"));
    Ok((a16, map_a, made))
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

/// Which kernel runs the single NVFP4 GEMM, and its config: on Hopper the
/// warp-specialized one (`gemm_nvfp4_ws_kernel`, B widened into shared
/// memory as the dual GEMM's), else the portable one (`gemm_nvfp4_kernel`;
/// a plain index means it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmConfig {
    Ws(usize),
    Mma(usize),
}

impl GemmConfig {
    /// Every config `gpu` can run, the Hopper kernel's first.
    pub fn all(gpu: &Gpu) -> Vec<GemmConfig> {
        let ws = (0..gemm_nvfp4_ws_kernel::CONFIGS.len()).map(GemmConfig::Ws).filter(|_| gemm_nvfp4_ws_kernel::supported(gpu));
        ws.chain((0..gemm_nvfp4_kernel::CONFIGS.len()).map(GemmConfig::Mma)).collect()
    }
}

impl From<usize> for GemmConfig {
    fn from(i: usize) -> Self {
        GemmConfig::Mma(i)
    }
}

/// `c = a·bᵀ` of NVFP4 operands, fp16 out: `a` `m × k`, `b` `n × k`, `c`
/// `[m, n]`; any `m` and `n`, `k` a multiple of 64.
///
/// ```ignore
/// gemm_nvfp4(&gpu, Nvfp4 { values: &x_fp4, scales: &x_scales }, Nvfp4 { values: &w, scales: &s }, &mut y)?;
/// ```
pub fn gemm_nvfp4(gpu: &Gpu, a: Nvfp4, b: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, k] = product_shape("gemm_nvfp4", a, b, c)?;
    gemm_nvfp4_with_config(gpu, choose_gemm(gpu, m, n, k), a, b, c)
}

/// The config `gemm_nvfp4` runs at `m × n × k` on `gpu`: on Hopper the
/// tuned table's winner (op `gemm_nvfp4`), else the first config (64
/// weight rows by 128 rows of A, a copy warpgroup); elsewhere the portable
/// kernel's, by how many programs fill the GPU.
pub fn choose_gemm(gpu: &Gpu, m: usize, n: usize, k: usize) -> GemmConfig {
    if gemm_nvfp4_ws_kernel::supported(gpu) {
        return GemmConfig::Ws(crate::tune::config(gpu.compute_capability(), "gemm_nvfp4", gemm_nvfp4_ws_kernel::CONFIGS, &[m, n, k], || 0));
    }
    let sms = gpu.sm_count() as usize;
    GemmConfig::Mma(if cdiv(m, 128) * cdiv(n, 128) >= sms {
        2
    } else if cdiv(m, 128) * cdiv(n, 64) >= sms {
        1
    } else {
        0
    })
}

/// [`gemm_nvfp4`] with config `cfg` (a plain index: one of `gemm_nvfp4_kernel::CONFIGS`).
pub fn gemm_nvfp4_with_config(gpu: &Gpu, cfg: impl Into<GemmConfig>, a: Nvfp4, b: Nvfp4, c: &mut Tensor<f16>) -> Result<()> {
    let [m, n, k] = product_shape("gemm_nvfp4", a, b, c)?;
    if m * n == 0 {
        return Ok(());
    }
    let wa = a.words([m, k])?;
    match cfg.into() {
        GemmConfig::Mma(cfg) => gemm_nvfp4_kernel::launch(gpu, cfg, &wa, a.scales, &b.words([n, k])?, b.scales, c, m, n, k),
        GemmConfig::Ws(cfg) => {
            let block = crate::gemm::block_shape("gemm_nvfp4_ws_kernel", gemm_nvfp4_ws_kernel::CONFIGS, cfg)?;
            let (a16, map_a, [(s, map_b, map_s)]) = ws_operands(gpu, block, (&wa, a.scales), [b], [m, n, k])?;
            gemm_nvfp4_ws_kernel::launch(gpu, cfg, &a16, b.values, &s, c, m, n, k, map_a, map_b, map_s)
        }
    }
}
