//! The host API of QuasarAttention's kernels: shape checks, then launches
//! (on a GPU or the CPU interpreter). Host-only.
use super::*;
use crate::check::expect_shape;
use crate::reduce::{col_sum_split, col_sum_split_len};
use rustile_host::{Error, Gpu, Result, Tensor};

fn sequences<T: Elem>(what: &str, x: &Tensor<T>) -> Result<[usize; 3]> {
    match *x.shape() {
        [batch, tokens, channels] if channels > 0 => Ok([batch, tokens, channels]),
        _ => Err(Error::Shape(format!("{what}: x must be [batch, tokens, channels]; it has shape {:?}", x.shape()))),
    }
}

/// Rows each backward program of the convolution and of the gated norm
/// takes (their `BT`, `BT·RB`), so one share of a weight's gradient each.
const CONV_SHARE_ROWS: usize = 32;
const NORM_SHARE_ROWS: usize = 32;

/// The convolution's weight-gradient shares for `batch` sequences of `tokens`.
fn shares(batch: usize, tokens: usize) -> usize {
    batch * tokens.div_ceil(CONV_SHARE_ROWS)
}

/// The convolution's config: the first, or the first whose name holds
/// `RUSTILE_QUASAR_CONFIG` (say `WARPS8` or `BC64`), to measure them apart.
fn conv_config(configs: &[rustile::KernelConfig]) -> usize {
    static FORCED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| std::env::var("RUSTILE_QUASAR_CONFIG").ok());
    forced.as_deref().and_then(|part| configs.iter().position(|c| c.name.contains(part))).unwrap_or(0)
}

fn bf16_only<T: Elem>(what: &str) -> Result<()> {
    if T::NAME != "bf16" {
        return Err(Error::Invalid(format!("{what}: activations must be bf16, not {}", T::NAME)));
    }
    Ok(())
}

/// What the backward of the convolution keeps between its launches: `da`
/// (like `x`), the per-block shares of `dw` and their partial sums. Reused
/// across calls of one shape.
pub struct ConvScratch<T: Elem> {
    da: Tensor<T>,
    part: Tensor<f32>,
    sums: Tensor<f32>,
}

impl<T: Elem> ConvScratch<T> {
    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.da.numel() * core::mem::size_of::<T>() + (self.part.numel() + self.sums.numel()) * 4
    }

    /// Scratch for `x` of `[batch, tokens, channels]`.
    pub fn new(gpu: &Gpu, shape: &[usize]) -> Result<Self> {
        let &[batch, tokens, channels] = shape else {
            return Err(Error::Shape(format!("ConvScratch: x must be [batch, tokens, channels], not {shape:?}")));
        };
        let blocks = shares(batch, tokens).max(1);
        let sums = gpu.alloc::<f32>(&[col_sum_split_len([blocks, WIDTH * channels]).max(1)])?;
        Ok(ConvScratch { da: gpu.alloc::<T>(shape)?, part: gpu.alloc::<f32>(&[blocks * WIDTH, channels])?, sums })
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

/// The gradients of [`conv_silu`]: `dx` (like `x`) and `dw` (`[4, channels]` f32, overwritten) from `dy`.
pub fn conv_silu_backward<T: Elem>(
    gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, dy: &Tensor<T>, dx: &mut Tensor<T>, dw: &mut Tensor<f32>, scratch: &mut ConvScratch<T>,
) -> Result<()> {
    bf16_only::<T>("conv_silu_backward")?;
    let [batch, tokens, channels] = sequences("conv_silu_backward", x)?;
    expect_shape("w", w, &[WIDTH, channels])?;
    for (what, t) in [("dy", dy), ("dx", &*dx), ("the scratch", &scratch.da)] {
        expect_shape(what, t, x.shape())?;
    }
    expect_shape("dw", dw, &[WIDTH, channels])?;
    let blocks = shares(batch, tokens);
    if scratch.part.shape()[0] < blocks * WIDTH || scratch.part.shape()[1] != channels {
        return Err(Error::Shape(format!("conv_silu_backward: the scratch is for {:?} shares × channels, not [{}, {channels}]", scratch.part.shape(), blocks * WIDTH)));
    }
    if blocks == 0 {
        return gpu.fill_bytes(dw, 0);
    }
    conv_silu_bwd_kernel::launch(gpu, conv_config(conv_silu_bwd_kernel::CONFIGS), x, w, dy, &mut scratch.da, &mut scratch.part, tokens, channels, batch)?;
    conv_dx_kernel::launch(gpu, conv_config(conv_dx_kernel::CONFIGS), &scratch.da, w, dx, tokens, channels, batch)?;
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
