//! LayerNorm and RMSNorm forward over the last dimension, for any row
//! length, saving the per-row statistics a backward pass needs.
//!
//! * LayerNorm: `y = (x − mean) · rstd · w + b`, `rstd = 1/sqrt(var + eps)`;
//!   saves `mean` and `rstd`.
//! * RMSNorm: `y = x · rstd · w`, `rstd = 1/sqrt(mean(x²) + eps)`; saves `rstd`.
//!
//! A row that fits one tile is read once and kept in registers; its mean and
//! variance come from one block-wide reduction of values shifted by the row's
//! first element (no cancellation for rows far from zero). Longer rows
//! combine per-tile (count, mean, M2) with Chan's formula, then take a second
//! pass.
use rustile::prelude::*;

// ---- kernels ---------------------------------------------------------------------------

row_kernel! {
grid = [cdiv(rows, BM * RP)],
/// LayerNorm of each row; `has_bias = 0` ignores `b`. A program takes `RP`
/// consecutive blocks of `BM` rows, loading block k+1 before reducing block k.
pub fn layer_norm_kernel<T: Elem>(
    x: Ptr<T>, w: Ptr<T>, b: Ptr<T>, y: PtrMut<T>, mean_out: PtrMut<f32>, rstd_out: PtrMut<f32>,
    rows: usize, cols: usize, eps: f32, has_bias: u32,
) {
    let first = program_id(0) * BM * RP;
    let src = |r0: usize| BlockPtr::<T, BM, BN>::rows(x, rows, cols, [r0, 0]);
    let dst = |r0: usize| BlockPtr::<T, BM, BN>::rows(y, rows, cols, [r0, 0]);
    let inside = |c0: usize| Tile::<bool, BM, BN>::from_fn(|_, c| c0 + c < cols);
    // Weight and bias of columns c0.. in T, loaded without a branch (no bias: zeros).
    let params = |c0: usize| (Row::<T, BM, BN>::load(w, c0, cols), Row::<T, BM, BN>::load(b, c0, if has_bias != 0 { cols } else { 0 }));

    if cols <= BN {
        // Each row fits one tile and stays in registers: one read, one write.
        // Mean and variance come from one block-wide round: the sums of
        // d = x − x[·, 0] and of d², then var = E[d²] − E[d]². Shifting by an
        // element of the row keeps E[d] on the scale of the row's spread, so
        // the subtraction does not cancel as E[x²] − E[x]² would for a row far
        // from zero.
        //
        // A row that fills the tile exactly needs no column mask, so the loop
        // is written once and instantiated twice (as Triton's EVEN_N): the
        // mask costs a compare and a select an element, which this issue-bound
        // kernel feels (bench/RESULTS.md).
        macro_rules! rows_in_one_tile {
            ($centre:expr) => {{
                let mut next = load(&src(first));
                let mut next_shift = Col::load_column(&src(first), 0);
                for k in 0..RP {
                    let r0 = first + k * BM;
                    if r0 >= rows {
                        return;
                    }
                    let (xt, shift) = (next.cast::<f32>(), next_shift.cast::<f32>());
                    if k + 1 < RP {
                        // The last block's successor is the next program's.
                        next = load(&src(r0 + BM));
                        next_shift = Col::load_column(&src(r0 + BM), 0);
                    }
                    let d: Tile<f32, BM, BN> = $centre(xt - shift);
                    let [sum, sum_sq] = Tile::row_sums([d, d * d]);
                    let dm = sum * (1.0 / cols as f32);
                    let var = (sum_sq * (1.0 / cols as f32) - dm * dm).max(Col::splat(0.0));
                    let rstd = (var + eps).rsqrt();
                    (shift + dm).store(mean_out, r0, rows);
                    rstd.store(rstd_out, r0, rows);
                    // w and b are loaded here, not held across the rows: registers decide
                    // whether two programs fit an SM, and the L2 hides their latency.
                    let (wt, bt) = params(0);
                    store(&dst(r0), &((d - dm) * rstd * wt.cast::<f32>() + bt.cast::<f32>()).cast::<T>());
                }
            }};
        }
        if cols == BN {
            rows_in_one_tile!(|t| t);
        } else {
            rows_in_one_tile!(|t| inside(0).select(t, Tile::zeros()));
        }
        return;
    }

    for k in 0..RP {
        let r0 = first + k * BM;
        if r0 >= rows {
            return;
        }
        // Statistics: (count, mean, M2) of each row, one tile at a time (Chan's formula).
        let (mut n, mut mean, mut m2) = (0.0f32, Col::<f32, BM, BN>::splat(0.0), Col::<f32, BM, BN>::splat(0.0));
        let mut c0 = 0;
        while c0 < cols {
            let xt = load(&src(r0).advance([0, c0])).cast::<f32>();
            let width = (if cols - c0 < BN { cols - c0 } else { BN }) as f32;
            let tmean = xt.row_sum() * (1.0 / width);
            let d = inside(c0).select(xt - tmean, Tile::zeros());
            let tm2 = (d * d).row_sum();
            let delta = tmean - mean;
            let n_new = n + width;
            mean = mean + delta * (width / n_new);
            m2 = m2 + tm2 + delta * delta * (n * width / n_new);
            n = n_new;
            c0 += BN;
        }
        let rstd = (m2 * (1.0 / cols as f32) + eps).rsqrt();
        mean.store(mean_out, r0, rows);
        rstd.store(rstd_out, r0, rows);
        let mut c0 = 0;
        while c0 < cols {
            let (wt, bt) = params(c0);
            let xt = load(&src(r0).advance([0, c0])).cast::<f32>();
            store(&dst(r0).advance([0, c0]), &((xt - mean) * rstd * wt.cast::<f32>() + bt.cast::<f32>()).cast::<T>());
            c0 += BN;
        }
    }
}
}

row_kernel! {
grid = [cdiv(rows, BM * RP)],
/// RMSNorm of each row (`RP` blocks of `BM` rows a program, as LayerNorm).
pub fn rms_norm_kernel<T: Elem>(x: Ptr<T>, w: Ptr<T>, y: PtrMut<T>, rstd_out: PtrMut<f32>, rows: usize, cols: usize, eps: f32) {
    let first = program_id(0) * BM * RP;
    let src = |r0: usize| BlockPtr::<T, BM, BN>::rows(x, rows, cols, [r0, 0]);
    let dst = |r0: usize| BlockPtr::<T, BM, BN>::rows(y, rows, cols, [r0, 0]);
    if cols <= BN {
        // Kept in T: as f32 it would hold twice the registers for the whole loop.
        let wt = Row::<T, BM, BN>::load(w, 0, cols);
        let mut next = load(&src(first));
        for k in 0..RP {
            let r0 = first + k * BM;
            if r0 >= rows {
                return;
            }
            let xt = next.cast::<f32>();
            if k + 1 < RP {
                next = load(&src(r0 + BM)); // the last block's successor is the next program's
            }
            let rstd = ((xt * xt).row_sum() * (1.0 / cols as f32) + eps).rsqrt();
            rstd.store(rstd_out, r0, rows);
            store(&dst(r0), &(xt * rstd * wt.cast::<f32>()).cast::<T>());
        }
        return;
    }
    for k in 0..RP {
        let r0 = first + k * BM;
        if r0 >= rows {
            return;
        }
        let mut sumsq = Col::<f32, BM, BN>::splat(0.0);
        let mut c0 = 0;
        while c0 < cols {
            let xt = load(&src(r0).advance([0, c0])).cast::<f32>();
            sumsq = sumsq + (xt * xt).row_sum();
            c0 += BN;
        }
        let rstd = (sumsq * (1.0 / cols as f32) + eps).rsqrt();
        rstd.store(rstd_out, r0, rows);
        let mut c0 = 0;
        while c0 < cols {
            let xt = load(&src(r0).advance([0, c0])).cast::<f32>();
            let wt = Row::<T, BM, BN>::load(w, c0, cols).cast::<f32>();
            store(&dst(r0).advance([0, c0]), &(xt * rstd * wt).cast::<T>());
            c0 += BN;
        }
    }
}
}

// ---- config choice and host API ----------------------------------------------------------

/// The config the norms run for rows of `cols` elements of `T`
/// (`crate::row_config`). At 8192×8192 on the H100 (bench/RESULTS.md), one
/// row a program and three programs an SM (RP = 1, OCC = 3) measured best
/// for bf16 (RMSNorm 95.2 µs, LayerNorm 99.7 µs) and f16 LayerNorm; f16
/// RMSNorm spills a little at that cap and takes RP = 2, OCC = 2 (94.5 µs,
/// the same as OCC = 3). f32 (twice the registers) takes RP = 1, OCC = 1.
#[cfg(not(target_arch = "nvptx64"))]
fn default_config<T: Elem>(cols: usize, rms: bool) -> usize {
    let at_8192 = match T::NAME {
        "f32" => (1, 1),
        "f16" if rms => (2, 2),
        _ => (1, 3),
    };
    crate::row_config(layer_norm_kernel::CONFIGS, cols, at_8192)
}

/// The config `layer_norm` runs for rows of `cols` elements of `T`.
#[cfg(not(target_arch = "nvptx64"))]
pub fn layer_norm_config<T: Elem>(cols: usize) -> usize {
    default_config::<T>(cols, false)
}

/// The config `rms_norm` runs for rows of `cols` elements of `T`.
#[cfg(not(target_arch = "nvptx64"))]
pub fn rms_norm_config<T: Elem>(cols: usize) -> usize {
    default_config::<T>(cols, true)
}

/// What a norm's forward pass saves for its backward pass (one value per row).
#[cfg(not(target_arch = "nvptx64"))]
pub struct NormStats {
    /// Row means (LayerNorm only; empty for RMSNorm).
    pub mean: Vec<f32>,
    pub rstd: Vec<f32>,
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::{expect_shape, matrix};
    use rustile_host::{Error, Gpu, Result, Tensor};

    fn check_eps(eps: f32) -> Result<()> {
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(Error::Shape(format!("eps must be a finite number ≥ 0, not {eps}")));
        }
        Ok(())
    }

    /// A row to normalize has at least one element: an empty one has no
    /// mean (0/0). No rows at all is fine (nothing to compute).
    pub(super) fn check_cols(op: &str, rows: usize, cols: usize) -> Result<()> {
        if rows > 0 && cols == 0 {
            return Err(Error::Shape(format!("{op}: x is [{rows}, 0]; rows of 0 elements have no statistics (cols must be at least 1)")));
        }
        Ok(())
    }

    /// LayerNorm over the last dimension of the 2-D `x`: writes `y` `[rows, cols]`,
    /// `mean` and `rstd` `[rows]` (f32). `w` and `b` are `[cols]`.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm<T: Elem>(
        gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, b: Option<&Tensor<T>>, eps: f32,
        y: &mut Tensor<T>, mean: &mut Tensor<f32>, rstd: &mut Tensor<f32>,
    ) -> Result<()> {
        let (rows, cols) = matrix("x", x)?;
        expect_shape("w", w, &[cols])?;
        if let Some(b) = b {
            expect_shape("b", b, &[cols])?;
        }
        expect_shape("y", y, &[rows, cols])?;
        expect_shape("mean", mean, &[rows])?;
        expect_shape("rstd", rstd, &[rows])?;
        check_eps(eps)?;
        check_cols("layer_norm", rows, cols)?;
        let cfg = layer_norm_config::<T>(cols);
        layer_norm_kernel::launch(gpu, cfg, x, w, b.unwrap_or(w), y, mean, rstd, rows, cols, eps, b.is_some() as u32)
    }

    /// RMSNorm over the last dimension of the 2-D `x`: writes `y` and `rstd` `[rows]`.
    pub fn rms_norm<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, eps: f32, y: &mut Tensor<T>, rstd: &mut Tensor<f32>) -> Result<()> {
        let (rows, cols) = matrix("x", x)?;
        expect_shape("w", w, &[cols])?;
        expect_shape("y", y, &[rows, cols])?;
        expect_shape("rstd", rstd, &[rows])?;
        check_eps(eps)?;
        check_cols("rms_norm", rows, cols)?;
        rms_norm_kernel::launch(gpu, rms_norm_config::<T>(cols), x, w, y, rstd, rows, cols, eps)
    }

    /// LayerNorm in the CPU interpreter: `(y, stats)`.
    pub fn layer_norm_cpu<T: Elem>(x: &[T], rows: usize, cols: usize, w: &[T], b: Option<&[T]>, eps: f32) -> (Vec<T>, NormStats) {
        assert_eq!(x.len(), rows * cols, "layer_norm: x holds {} elements, not {rows}×{cols}", x.len());
        assert_eq!(w.len(), cols, "layer_norm: w must have {cols} elements");
        check_cols("layer_norm", rows, cols).unwrap_or_else(|e| panic!("{e}"));
        let mut y = vec![T::default(); x.len()];
        let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
        let bias = b.unwrap_or(w);
        assert_eq!(bias.len(), cols, "layer_norm: b must have {cols} elements");
        layer_norm_kernel::cpu(layer_norm_config::<T>(cols), x, w, bias, &mut y, &mut mean, &mut rstd, rows, cols, eps, b.is_some() as u32);
        (y, NormStats { mean, rstd })
    }

    /// RMSNorm in the CPU interpreter: `(y, stats)` (`stats.mean` is empty).
    pub fn rms_norm_cpu<T: Elem>(x: &[T], rows: usize, cols: usize, w: &[T], eps: f32) -> (Vec<T>, NormStats) {
        assert_eq!(x.len(), rows * cols, "rms_norm: x holds {} elements, not {rows}×{cols}", x.len());
        assert_eq!(w.len(), cols, "rms_norm: w must have {cols} elements");
        check_cols("rms_norm", rows, cols).unwrap_or_else(|e| panic!("{e}"));
        let mut y = vec![T::default(); x.len()];
        let mut rstd = vec![0.0; rows];
        rms_norm_kernel::cpu(rms_norm_config::<T>(cols), x, w, &mut y, &mut rstd, rows, cols, eps);
        (y, NormStats { mean: Vec::new(), rstd })
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

mod backward;
pub use backward::*;

#[cfg(test)]
mod tests;
