//! The host API of QuasarAttention's kernels: shape checks, then launches
//! (on a GPU or the CPU interpreter). Host-only.
use super::*;
use crate::check::expect_shape;
use crate::gemm::Transpose;
use crate::reduce::{col_sum_split, col_sum_split_len};
use rustile_host::{Error, Gpu, Result, Tensor};

fn sequences<T: Elem>(what: &str, x: &Tensor<T>) -> Result<[usize; 3]> {
    match *x.shape() {
        [batch, tokens, channels] if channels > 0 => Ok([batch, tokens, channels]),
        _ => Err(Error::Shape(format!("{what}: x must be [batch, tokens, channels]; it has shape {:?}", x.shape()))),
    }
}

/// Rows each backward program of the gated norm takes (`BT·RB`), so one
/// share of its weight's gradient each.
const NORM_SHARE_ROWS: usize = 32;

/// The convolution's weight-gradient shares for `batch` sequences of
/// `tokens` under config `cfg` of its backward (a share per `BT` rows).
fn shares(cfg: usize, batch: usize, tokens: usize) -> usize {
    batch * tokens.div_ceil(conv_silu_bwd_kernel::CONFIGS[cfg].get("BT").expect("conv_silu_bwd_kernel's configs name BT"))
}

/// The convolution's config: the first, or the first whose name holds
/// `RUSTILE_QUASAR_CONFIG` (say `WARPS8` or `BC64`), to measure them apart.
fn conv_config(configs: &[rustile::KernelConfig]) -> usize {
    forced_config(configs).unwrap_or(0)
}

/// The config whose name holds `RUSTILE_QUASAR_CONFIG`, if any.
fn forced_config(configs: &[rustile::KernelConfig]) -> Option<usize> {
    static FORCED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| std::env::var("RUSTILE_QUASAR_CONFIG").ok());
    forced.as_deref().and_then(|part| configs.iter().position(|c| c.name.contains(part)))
}

/// Whether `RUSTILE_QUASAR_UNFUSED` is set: the fused kernels' callers
/// take their unfused paths instead, to measure one against the other.
fn unfused() -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UNFUSED.get_or_init(|| std::env::var_os("RUSTILE_QUASAR_UNFUSED").is_some())
}

/// `conv_silu_bwd_kernel`'s config (unless `RUSTILE_QUASAR_CONFIG` names
/// one): the longest blocks (128, 64, 32 rows) whose threads, one an
/// 8-channel strip of a block, give every SM 4 warps; else 16 rows. Longer
/// blocks recompute fewer halo rows; shorter ones make more threads for few
/// tokens (measured at 4096, 65,536 and a million tokens: bench/RESULTS.md,
/// 2026-11-28, "The convolution's backward in one pass…").
fn conv_bwd_config(gpu: &Gpu, batch: usize, tokens: usize, channels: usize) -> usize {
    if let Some(cfg) = forced_config(conv_silu_bwd_kernel::CONFIGS) {
        return cfg;
    }
    let warps = |bt: usize| batch * tokens.div_ceil(bt) * channels.div_ceil(8) / 32;
    let by_rows = |bt: usize| conv_silu_bwd_kernel::CONFIGS.iter().position(|c| c.get("BT") == Some(bt)).expect("conv_silu_bwd_kernel lists blocks of 128, 64, 32 and 16 rows");
    let rows = [128, 64, 32].into_iter().find(|&bt| warps(bt) >= 4 * gpu.sm_count() as usize).unwrap_or(16);
    by_rows(rows)
}

/// `proj_conv_silu_kernel`'s config (unless `RUSTILE_QUASAR_CONFIG` names
/// one): 128×256 blocks where they fill the SMs four times over, else
/// 128×128 two to an SM where those fill them twice, else 64×128 three to
/// an SM. Measured at a million tokens (128×256 fastest), 65,536 (the
/// same) and 4096 (64×128 fastest, 128×256 slowest: too few blocks):
/// bench/RESULTS.md, 2026-11-27, “QuasarAttention's projections and
/// convolutions in one kernel…”.
fn proj_config(gpu: &Gpu, batch: usize, tokens: usize, channels: usize) -> usize {
    if let Some(cfg) = forced_config(proj_conv_silu_kernel::CONFIGS) {
        return cfg;
    }
    let sms = gpu.sm_count() as usize;
    let blocks = |bm: usize, bn: usize| batch * tokens.div_ceil(bm - (WIDTH - 1)) * channels.div_ceil(bn);
    let by_shape = |bm: usize, bn: usize| {
        proj_conv_silu_kernel::CONFIGS.iter().position(|c| c.get("BM") == Some(bm) && c.get("BN") == Some(bn)).expect("proj_conv_silu_kernel lists 128×256, 128×128 and 64×128 blocks")
    };
    if blocks(128, 256) >= 4 * sms {
        by_shape(128, 256)
    } else if blocks(128, 128) >= 2 * sms {
        by_shape(128, 128)
    } else {
        by_shape(64, 128)
    }
}

fn bf16_only<T: Elem>(what: &str) -> Result<()> {
    if T::NAME != "bf16" {
        return Err(Error::Invalid(format!("{what}: activations must be bf16, not {}", T::NAME)));
    }
    Ok(())
}

/// What the backward of the convolution keeps between its launches: the
/// per-block shares of `dw` and their partial sums, for the config a shape
/// takes (grown when a call takes one with more shares). Reused across
/// calls of one shape.
pub struct ConvScratch {
    part: Tensor<f32>,
    sums: Tensor<f32>,
}

impl ConvScratch {
    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        (self.part.numel() + self.sums.numel()) * 4
    }

    /// Scratch for `x` of `[batch, tokens, channels]` on `gpu`.
    pub fn new(gpu: &Gpu, shape: &[usize]) -> Result<Self> {
        let &[batch, tokens, channels] = shape else {
            return Err(Error::Shape(format!("ConvScratch: x must be [batch, tokens, channels], not {shape:?}")));
        };
        Self::alloc(gpu, shares(conv_bwd_config(gpu, batch, tokens, channels), batch, tokens), channels)
    }

    fn alloc(gpu: &Gpu, blocks: usize, channels: usize) -> Result<Self> {
        let blocks = blocks.max(1);
        let sums = gpu.alloc::<f32>(&[col_sum_split_len([blocks, WIDTH * channels]).max(1)])?;
        Ok(ConvScratch { part: gpu.alloc::<f32>(&[blocks * WIDTH, channels])?, sums })
    }

    /// Room for `blocks` shares of `channels`.
    fn fit(&mut self, gpu: &Gpu, blocks: usize, channels: usize) -> Result<()> {
        if self.part.shape()[0] < blocks * WIDTH || self.part.shape()[1] != channels {
            *self = Self::alloc(gpu, blocks, channels)?;
        }
        Ok(())
    }
}

/// `y = silu(conv(x))`: the causal width-4 convolution of each channel of
/// `x` (`[batch, tokens, channels]` bf16, each sequence from its own start),
/// weights `w` `[4, channels]`, then SiLU. See the module docs.
pub fn conv_silu<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
    bf16_only::<T>("conv_silu")?;
    let [batch, tokens, channels] = sequences("conv_silu", x)?;
    expect_shape("w", w, &[WIDTH, channels])?;
    expect_shape("y", y, x.shape())?;
    if batch * tokens == 0 {
        return Ok(());
    }
    conv_silu_kernel::launch(gpu, conv_config(conv_silu_kernel::CONFIGS), x, w, y, tokens, channels, batch)
}

/// `y = silu(conv(x·wpᵀ))`: a projection, then [`conv_silu`], in one kernel
/// on Hopper (`proj_conv_silu_kernel`), so the projection is never read
/// back. `x` `[batch, tokens, hidden]`, `wp` `[channels, hidden]` (an
/// `nn.Linear`'s weight), `w` `[4, channels]`, `y` `[batch, tokens,
/// channels]`; `pre`, where given, gets the projection `x·wpᵀ` (what
/// [`conv_silu_backward`] reads), rounded as `y`'s input was. Elsewhere (no
/// `wgmma`, `hidden` not a multiple of 8, or `RUSTILE_QUASAR_UNFUSED` set,
/// to measure one against the other), the GEMM and then [`conv_silu`],
/// through `pre` or a buffer of its size.
pub fn proj_conv_silu<T: Elem>(gpu: &Gpu, x: &Tensor<T>, wp: &Tensor<T>, w: &Tensor<T>, pre: Option<&mut Tensor<T>>, y: &mut Tensor<T>) -> Result<()> {
    proj_conv_silu_with_config(gpu, None, x, wp, w, pre, y)
}

/// [`proj_conv_silu`] with config `cfg` of `proj_conv_silu_kernel::CONFIGS`
/// where that kernel runs (`None`: chosen by [`proj_config`]; for tests
/// and sweeps).
pub fn proj_conv_silu_with_config<T: Elem>(
    gpu: &Gpu, cfg: Option<usize>, x: &Tensor<T>, wp: &Tensor<T>, w: &Tensor<T>, pre: Option<&mut Tensor<T>>, y: &mut Tensor<T>,
) -> Result<()> {
    bf16_only::<T>("proj_conv_silu")?;
    let [batch, tokens, hidden] = sequences("proj_conv_silu", x)?;
    let channels = wp.shape().first().copied().unwrap_or(0);
    expect_shape("wp", wp, &[channels, hidden])?;
    expect_shape("w", w, &[WIDTH, channels])?;
    expect_shape("y", y, &[batch, tokens, channels])?;
    if let Some(pre) = &pre {
        expect_shape("pre", pre, y.shape())?;
    }
    for (what, t) in [("x", x), ("wp", wp), ("w", w), ("y", &*y)] {
        if !t.is_contiguous() {
            return Err(Error::Shape(format!("proj_conv_silu: {what} must be contiguous; its strides are {:?}", t.strides())));
        }
    }
    let rows = batch * tokens;
    if rows * channels == 0 {
        return Ok(());
    }
    if unfused() || !proj_conv_silu_kernel::supported(gpu) || hidden % 8 != 0 {
        let mut own = None;
        let pre = match pre {
            Some(pre) => pre,
            None => own.insert(gpu.alloc::<T>(y.shape())?),
        };
        crate::gemm::gemm(gpu, &x.view(0, &[rows, hidden])?, wp.t(), &mut pre.view(0, &[rows, channels])?, &crate::gemm::Epilogue::new())?;
        return conv_silu(gpu, pre, w, y);
    }
    let cfg = cfg.unwrap_or_else(|| proj_config(gpu, batch, tokens, channels));
    let [bm, bn] = crate::gemm::block_shape("proj_conv_silu_kernel", proj_conv_silu_kernel::CONFIGS, cfg)?;
    let map_x = crate::gemm::tma_map(gpu, x, [hidden, rows, 1], [hidden, hidden * rows], bm)?;
    let map_wp = crate::gemm::tma_map(gpu, wp, [hidden, channels, 1], [hidden, hidden * channels], bn)?;
    // Without `pre` the kernel writes none: an empty tensor stands in.
    let mut unused;
    let (keep, pre) = match pre {
        Some(pre) => (1, pre),
        None => {
            unused = gpu.alloc::<T>(&[0])?;
            (0, &mut unused)
        }
    };
    proj_conv_silu_kernel::launch(gpu, cfg, x, wp, w, pre, y, tokens, channels, hidden, batch, keep, map_x, map_wp)
}

/// The gradients of [`conv_silu`]: `dx` (like `x`) and `dw` (`[4, channels]` f32, overwritten) from `dy`.
pub fn conv_silu_backward<T: Elem>(
    gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, dy: &Tensor<T>, dx: &mut Tensor<T>, dw: &mut Tensor<f32>, scratch: &mut ConvScratch,
) -> Result<()> {
    conv_silu_backward_with_config(gpu, None, x, w, dy, dx, dw, scratch)
}

/// [`conv_silu_backward`] with config `cfg` of `conv_silu_bwd_kernel::CONFIGS`
/// (`None`: by the shape, unless `RUSTILE_QUASAR_CONFIG` names one).
#[allow(clippy::too_many_arguments)]
pub fn conv_silu_backward_with_config<T: Elem>(
    gpu: &Gpu, cfg: Option<usize>, x: &Tensor<T>, w: &Tensor<T>, dy: &Tensor<T>, dx: &mut Tensor<T>, dw: &mut Tensor<f32>, scratch: &mut ConvScratch,
) -> Result<()> {
    bf16_only::<T>("conv_silu_backward")?;
    let [batch, tokens, channels] = sequences("conv_silu_backward", x)?;
    expect_shape("w", w, &[WIDTH, channels])?;
    for (what, t) in [("dy", dy), ("dx", &*dx)] {
        expect_shape(what, t, x.shape())?;
    }
    expect_shape("dw", dw, &[WIDTH, channels])?;
    let cfg = cfg.unwrap_or_else(|| conv_bwd_config(gpu, batch, tokens, channels));
    if cfg >= conv_silu_bwd_kernel::CONFIGS.len() {
        return Err(Error::Invalid(format!("conv_silu_backward: no config {cfg} (conv_silu_bwd_kernel has {})", conv_silu_bwd_kernel::CONFIGS.len())));
    }
    let blocks = shares(cfg, batch, tokens);
    scratch.fit(gpu, blocks, channels)?;
    if blocks == 0 {
        return gpu.fill_bytes(dw, 0);
    }
    conv_silu_bwd_kernel::launch(gpu, cfg, x, w, dy, dx, &mut scratch.part, tokens, channels, batch)?;
    let mut flat = dw.view(0, &[WIDTH * channels])?;
    col_sum_split(gpu, &scratch.part, [blocks, WIDTH * channels], [WIDTH * channels, 0], &mut scratch.sums, &mut flat)
}

/// `[tokens, heads]` of `o` `[.., heads·64]`.
fn norm_rows<T: Elem>(what: &str, o: &Tensor<T>) -> Result<[usize; 2]> {
    match o.shape().last() {
        Some(&c) if c > 0 && c % HEAD == 0 => Ok([o.numel() / c, c / HEAD]),
        _ => Err(Error::Shape(format!("{what}: the last dim must be heads·{HEAD}; o has shape {:?}", o.shape()))),
    }
}

/// `y = o·rstd·w ⊙ sigmoid(g)` over each token's head: `o`, `g` and `y`
/// `[.., heads·64]` bf16, `w` `[64]`; saves `rstd` (`[heads, tokens]` f32,
/// tokens counted over every leading dim) for the backward.
pub fn gated_rms_norm<T: Elem>(gpu: &Gpu, o: &Tensor<T>, g: &Tensor<T>, w: &Tensor<T>, eps: f32, y: &mut Tensor<T>, rstd: &mut Tensor<f32>) -> Result<()> {
    bf16_only::<T>("gated_rms_norm")?;
    let [tokens, heads] = norm_rows("gated_rms_norm", o)?;
    for (what, t) in [("g", g), ("y", &*y)] {
        expect_shape(what, t, o.shape())?;
    }
    expect_shape("w", w, &[HEAD])?;
    expect_shape("rstd", rstd, &[heads, tokens])?;
    if tokens == 0 {
        return Ok(());
    }
    gated_rms_norm_kernel::launch(gpu, 0, o, g, w, y, rstd, tokens, heads, eps)
}

/// `out = y·woᵀ` with `y = o·rstd·w ⊙ sigmoid(g1·wg2ᵀ + bias)` over each
/// token's head (the gated norm of [`gated_rms_norm`], its gate's second
/// projection and the output projection), in one kernel on Hopper
/// (`gated_out_proj_kernel`): neither the gate nor `y` is written. `o`
/// `[.., heads·64]`, `g1` (the gate's bottleneck) `[.., rank]`, `wg2`
/// `[heads·64, rank]`, `bias` `[heads·64]`, `w` `[64]`, `wo` `[n_out,
/// heads·64]`, `out` `[.., n_out]`, all bf16, the leading dims of `o`,
/// `g1` and `out` the same tokens. For inference: the backward reads `g`
/// and `y`, which [`gated_rms_norm`] and the GEMMs keep. It needs no
/// buffer for them (2 GB at a million tokens of hidden 512) and is faster
/// than the three steps (bench/RESULTS.md, 2026-11-28, "The gated norm in
/// the output projection's prologue, 37 % faster…"): the layer's `infer`
/// runs it.
/// Elsewhere (no `wgmma`, a gate rank other than 64, or
/// `RUSTILE_QUASAR_UNFUSED` set) the three steps, through buffers made for
/// the call.
#[allow(clippy::too_many_arguments)]
pub fn gated_out_proj<T: Elem>(
    gpu: &Gpu, o: &Tensor<T>, g1: &Tensor<T>, wg2: &Tensor<T>, bias: &Tensor<T>, w: &Tensor<T>, wo: &Tensor<T>, eps: f32, out: &mut Tensor<T>,
) -> Result<()> {
    gated_out_proj_with_config(gpu, None, o, g1, wg2, bias, w, wo, eps, out)
}

/// Whether [`gated_out_proj`] runs its one kernel for a gate of rank `rank`
/// on `gpu` (else it makes the three steps through buffers of its own, and
/// a caller that holds such buffers had better run the steps itself).
pub fn gated_out_proj_fuses(gpu: &Gpu, rank: usize) -> bool {
    !unfused() && rank == HEAD && gated_out_proj_kernel::supported(gpu)
}

/// [`gated_out_proj`] with config `cfg` of `gated_out_proj_kernel::CONFIGS`
/// where that kernel runs (`None`: the first, unless `RUSTILE_QUASAR_CONFIG`
/// names another; for tests and sweeps).
#[allow(clippy::too_many_arguments)]
pub fn gated_out_proj_with_config<T: Elem>(
    gpu: &Gpu, cfg: Option<usize>, o: &Tensor<T>, g1: &Tensor<T>, wg2: &Tensor<T>, bias: &Tensor<T>, w: &Tensor<T>, wo: &Tensor<T>, eps: f32, out: &mut Tensor<T>,
) -> Result<()> {
    bf16_only::<T>("gated_out_proj")?;
    let [rows, heads] = norm_rows("gated_out_proj", o)?;
    let channels = heads * HEAD;
    let n_out = wo.shape().first().copied().unwrap_or(0);
    expect_shape("wo", wo, &[n_out, channels])?;
    let rank = wg2.shape().last().copied().unwrap_or(0);
    expect_shape("wg2", wg2, &[channels, rank])?;
    expect_shape("bias", bias, &[channels])?;
    expect_shape("w", w, &[HEAD])?;
    for (what, t, width) in [("g1", g1, rank), ("out", &*out, n_out)] {
        if t.shape().last() != Some(&width) || t.numel() != rows * width {
            return Err(Error::Shape(format!("gated_out_proj: {what} must be [.., {width}] over o's {rows} tokens; it has shape {:?}", t.shape())));
        }
    }
    for (what, t) in [("o", o), ("g1", g1), ("wg2", wg2), ("bias", bias), ("w", w), ("wo", wo), ("out", &*out)] {
        if !t.is_contiguous() {
            return Err(Error::Shape(format!("gated_out_proj: {what} must be contiguous; its strides are {:?}", t.strides())));
        }
    }
    if rows * n_out == 0 {
        return Ok(());
    }
    if !gated_out_proj_fuses(gpu, rank) {
        use crate::gemm::{gemm, Epilogue};
        let (mut g, mut y) = (gpu.alloc::<T>(&[rows, channels])?, gpu.alloc::<T>(&[rows, channels])?);
        gemm(gpu, &g1.view(0, &[rows, rank])?, wg2.t(), &mut g, &Epilogue::new().bias_per_column(bias))?;
        gated_rms_norm(gpu, &o.view(0, &[rows, channels])?, &g, w, eps, &mut y, &mut gpu.alloc::<f32>(&[heads, rows])?)?;
        return gemm(gpu, &y, wo.t(), &mut out.view(0, &[rows, n_out])?, &Epilogue::new());
    }
    let cfg = cfg.or_else(|| forced_config(gated_out_proj_kernel::CONFIGS)).unwrap_or(0);
    gated_out_proj_kernel::launch(gpu, cfg, o, g1, wg2, bias, w, wo, out, rows, channels, n_out, eps)
}

/// What the gated norm's backward keeps: the per-block shares of `dw` and
/// of `Σ dg`, and their partial sums.
pub struct NormScratch {
    part_w: Tensor<f32>,
    part_g: Tensor<f32>,
    sums: Tensor<f32>,
}

impl NormScratch {
    /// Scratch for `o` of `[tokens, heads·64]` (tokens over every leading dim).
    pub fn new(gpu: &Gpu, tokens: usize, heads: usize) -> Result<Self> {
        let blocks = tokens.div_ceil(NORM_SHARE_ROWS).max(1);
        let sums = col_sum_split_len([blocks * heads, HEAD]).max(col_sum_split_len([blocks, heads * HEAD])).max(1);
        Ok(NormScratch { part_w: gpu.alloc::<f32>(&[blocks * heads, HEAD])?, part_g: gpu.alloc::<f32>(&[blocks, heads * HEAD])?, sums: gpu.alloc::<f32>(&[sums])? })
    }
}

/// The gradients of [`gated_rms_norm`]: `d_o`, `dg` (like `o`) and `dw`
/// (`[64]`, overwritten) from `dy`; with `dg_sum` (`[heads·64]`), also `Σ_t
/// dg` (the gradient of a bias added to `g`).
#[allow(clippy::too_many_arguments)]
pub fn gated_rms_norm_backward<T: Elem>(
    gpu: &Gpu, dy: &Tensor<T>, o: &Tensor<T>, g: &Tensor<T>, w: &Tensor<T>, rstd: &Tensor<f32>, d_o: &mut Tensor<T>, dg: &mut Tensor<T>, dw: &mut Tensor<f32>,
    dg_sum: Option<&mut Tensor<f32>>, scratch: &mut NormScratch,
) -> Result<()> {
    bf16_only::<T>("gated_rms_norm_backward")?;
    let [tokens, heads] = norm_rows("gated_rms_norm_backward", o)?;
    for (what, t) in [("dy", dy), ("g", g), ("d_o", &*d_o), ("dg", &*dg)] {
        expect_shape(what, t, o.shape())?;
    }
    expect_shape("w", w, &[HEAD])?;
    expect_shape("dw", dw, &[HEAD])?;
    expect_shape("rstd", rstd, &[heads, tokens])?;
    let blocks = tokens.div_ceil(NORM_SHARE_ROWS);
    if scratch.part_g.shape() != [blocks.max(1), heads * HEAD] {
        return Err(Error::Shape(format!("gated_rms_norm_backward: the scratch is for {:?} blocks × channels, not [{blocks}, {}]", scratch.part_g.shape(), heads * HEAD)));
    }
    if blocks == 0 {
        gpu.fill_bytes(dw, 0)?;
        return dg_sum.map_or(Ok(()), |s| gpu.fill_bytes(s, 0));
    }
    gated_rms_norm_bwd_kernel::launch(gpu, 0, dy, o, g, w, rstd, d_o, dg, &mut scratch.part_w, &mut scratch.part_g, tokens, heads)?;
    col_sum_split(gpu, &scratch.part_w, [blocks * heads, HEAD], [HEAD, 0], &mut scratch.sums, dw)?;
    match dg_sum {
        Some(s) => {
            expect_shape("dg_sum", s, &[heads * HEAD])?;
            col_sum_split(gpu, &scratch.part_g, [blocks, heads * HEAD], [heads * HEAD, 0], &mut scratch.sums, s)
        }
        None => Ok(()),
    }
}

/// `β = softplus(β_log)` per head (`[heads]` f32 out).
pub fn softplus<T: Elem>(gpu: &Gpu, beta_log: &Tensor<T>, beta: &mut Tensor<f32>) -> Result<()> {
    expect_shape("beta", beta, beta_log.shape())?;
    softplus_kernel::launch(gpu, 0, beta_log, beta, beta_log.numel())
}

/// [`softplus`]'s backward: `d_beta_log = d_beta·sigmoid(β_log)`.
pub fn softplus_backward<T: Elem>(gpu: &Gpu, beta_log: &Tensor<T>, d_beta: &Tensor<f32>, d_beta_log: &mut Tensor<f32>) -> Result<()> {
    expect_shape("d_beta", d_beta, beta_log.shape())?;
    expect_shape("d_beta_log", d_beta_log, beta_log.shape())?;
    softplus_bwd_kernel::launch(gpu, 0, beta_log, d_beta, d_beta_log, beta_log.numel())
}
