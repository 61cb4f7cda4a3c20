//! LayerNorm and RMSNorm backward, for any row length, from the statistics
//! the forward saved (`mean`, `rstd`).
//!
//! With `x̂ = (x − mean)·rstd` (RMSNorm: `x·rstd`) and `g = dy·w`:
//! `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))` (RMSNorm drops `mean(g)`),
//! `dw = Σ_rows dy·x̂`, `db = Σ_rows dy`.
//!
//! The weight gradients are reduced without atomics, so a run gives the
//! same bits every time: each program sums its rows' `dy·x̂` and `dy` in
//! registers and writes one row of partial sums, and [`col_sum_kernel`]
//! adds the partial rows up in a fixed order. A program walks row blocks
//! `p, p + P, p + 2P, …` (`P` programs, about two a SM), so the partials are
//! a few hundred rows whatever the batch. Rows longer than a tile take two
//! passes over their column tiles (row sums, then `dx`), and their
//! programs each take one row block, writing the partial sums per tile.
use rustile::prelude::*;

/// `flags` bits of [`norm_bwd_kernel`].
pub const RMS: u32 = 1;
/// Adds `dres` to `dx`: the gradient that reaches a pre-norm block's input
/// through its residual connection, so the block's input gradient is one write.
pub const ADD: u32 = 2;

// ---- kernels ---------------------------------------------------------------------------

#[kernel(
    configs = [
        (BM = 32, BN = 32, WARPS = 4),
        (BM = 16, BN = 128, WARPS = 4),
        (BM = 4, BN = 512, WARPS = 4),
        (BM = 2, BN = 1024, WARPS = 8),
        (BM = 1, BN = 2048, WARPS = 8),
        (BM = 1, BN = 4096, WARPS = 16),
    ],
    grid = [programs],
    dtypes = [f32, bf16, f16],
)]
/// The backward of LayerNorm (`flags & RMS == 0`) or RMSNorm over rows of
/// `cols`: writes `dx` (plus `dres` with `ADD`) and, per program `p`, the
/// partial sums of `dy·x̂` in row `2p` of `part` (`[2·programs, cols]`) and
/// of `dy` in row `2p + 1`. `mean` is not read for RMSNorm. With rows
/// longer than `BN`, `programs` must be the number of row blocks.
pub fn norm_bwd_kernel<T: Elem>(
    dy: Ptr<T>, x: Ptr<T>, w: Ptr<T>, mean: Ptr<f32>, rstd: Ptr<f32>, dres: Ptr<T>,
    dx: PtrMut<T>, part: PtrMut<f32>, rows: usize, cols: usize, programs: usize, flags: u32,
) {
    let (rms, add) = (flags & RMS != 0, flags & ADD != 0);
    let p = program_id(0);
    let at = |t: Ptr<T>, r0: usize, c0: usize| BlockPtr::<T, BM, BN>::rows(t, rows, cols, [r0, c0]);
    let inv = 1.0 / cols as f32;
    // x̂ and g of one tile; rows and columns outside are zeros in dy, so
    // they add nothing to any sum below.
    let tile = |r0: usize, c0: usize, mu: Col<f32, BM, BN>, r: Col<f32, BM, BN>| {
        let dyt = load(&at(dy, r0, c0)).cast::<f32>();
        let xt = load(&at(x, r0, c0)).cast::<f32>();
        let xh = if rms { xt * r } else { (xt - mu) * r };
        (dyt, xh, dyt * Row::<T, BM, BN>::load(w, c0, cols).cast::<f32>())
    };
    let stats = |r0: usize| (Col::<f32, BM, BN>::load(mean, r0, if rms { 0 } else { rows }), Col::<f32, BM, BN>::load(rstd, r0, rows));
    let finish = |r0: usize, c0: usize, xh: Tile<f32, BM, BN>, g: Tile<f32, BM, BN>, [c1, c2]: [Col<f32, BM, BN>; 2], r: Col<f32, BM, BN>| {
        let mut d = (g - c1 - xh * c2) * r;
        if add {
            d = d + load(&at(dres, r0, c0)).cast::<f32>();
        }
        store(&BlockPtr::<T, BM, BN>::rows(dx, rows, cols, [r0, c0]), &d.cast::<T>());
    };
    // mean(g) (0 for RMSNorm) and mean(g·x̂) of each row, from their sums.
    let means = |sg: Col<f32, BM, BN>, sgx: Col<f32, BM, BN>| [if rms { Col::splat(0.0) } else { sg * inv }, sgx * inv];

    if cols <= BN {
        let (mut acc_w, mut acc_b) = (Tile::<f32, BM, BN>::zeros(), Tile::<f32, BM, BN>::zeros());
        let mut blk = p;
        while blk * BM < rows {
            let r0 = blk * BM;
            let (mu, r) = stats(r0);
            let (dyt, xh, g) = tile(r0, 0, mu, r);
            let [sg, sgx] = Tile::row_sums([g, g * xh]);
            finish(r0, 0, xh, g, means(sg, sgx), r);
            acc_w = acc_w + dyt * xh;
            acc_b = acc_b + dyt;
            blk += programs;
        }
        acc_w.col_sum().store(part.offset(2 * p * cols), 0, cols);
        acc_b.col_sum().store(part.offset((2 * p + 1) * cols), 0, cols);
        return;
    }

    // One row block of long rows: the row sums first, then dx and the
    // partial sums tile by tile.
    let r0 = p * BM;
    let (mu, r) = stats(r0);
    let (mut sg, mut sgx) = (Col::<f32, BM, BN>::splat(0.0), Col::<f32, BM, BN>::splat(0.0));
    let mut c0 = 0;
    while c0 < cols {
        let (_, xh, g) = tile(r0, c0, mu, r);
        let [a, b] = Tile::row_sums([g, g * xh]);
        sg = sg + a;
        sgx = sgx + b;
        c0 += BN;
    }
    let m = means(sg, sgx);
    let mut c0 = 0;
    while c0 < cols {
        let (dyt, xh, g) = tile(r0, c0, mu, r);
        finish(r0, c0, xh, g, m, r);
        (dyt * xh).col_sum().store(part.offset(2 * p * cols), c0, cols);
        dyt.col_sum().store(part.offset((2 * p + 1) * cols), c0, cols);
        c0 += BN;
    }
}

// ---- host API --------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::{expect_shape, matrix};
    use crate::reduce::{col_sum, col_sum_cpu};
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// The config for rows of `cols`: the narrowest tile that holds a row,
    /// else the widest (two passes).
    pub fn norm_backward_config(cols: usize) -> usize {
        crate::pick_config(norm_bwd_kernel::CONFIGS, |c| c.get("BN").unwrap() >= cols)
    }

    /// Programs of the backward for `rows × cols` on a GPU of `sms` SMs:
    /// two a SM (each walks every `P`-th row block), or one per row block
    /// for rows longer than a tile.
    pub fn norm_backward_programs(rows: usize, cols: usize, sms: usize) -> usize {
        let c = &norm_bwd_kernel::CONFIGS[norm_backward_config(cols)];
        let blocks = rows.div_ceil(c.get("BM").unwrap());
        if cols > c.get("BN").unwrap() { blocks } else { blocks.min(2 * sms.max(1)) }
    }

    /// The scratch the backward of `rows × cols` needs on `gpu`: the
    /// partial weight and bias sums, `[2·programs, cols]` f32. Allocate it
    /// once and pass it to every step.
    pub fn norm_backward_scratch(gpu: &Gpu, rows: usize, cols: usize) -> Result<Tensor<f32>> {
        gpu.alloc(&[2 * norm_backward_programs(rows, cols, gpu.sm_count() as usize), cols])
    }

    /// What the norm was: which statistics its forward saved.
    #[derive(Clone, Copy)]
    pub enum Saved<'a> {
        /// LayerNorm's `mean` and `rstd` (`[rows]` each).
        LayerNorm { mean: &'a Tensor<f32>, rstd: &'a Tensor<f32> },
        /// RMSNorm's `rstd`.
        RmsNorm { rstd: &'a Tensor<f32> },
    }

    /// The gradients a norm's backward writes: `dx` (x's shape), `dw` and
    /// (LayerNorm with a bias) `db`, `[cols]` in f32.
    pub struct NormGrads<'a, T> {
        pub dx: &'a mut Tensor<T>,
        pub dw: &'a mut Tensor<f32>,
        pub db: Option<&'a mut Tensor<f32>>,
    }

    /// The backward of [`layer_norm`](super::layer_norm) or
    /// [`rms_norm`](super::rms_norm) over the last dimension of `x`
    /// `[rows, cols]`, given the output gradient `dy` and what the forward
    /// saved; with `dres` (x's shape) `dx = dres + ∂/∂x`, the gradient of a
    /// pre-norm block's input. `scratch` is [`norm_backward_scratch`]'s.
    /// Deterministic: the same inputs give the same bits.
    ///
    /// ```ignore
    /// layer_norm(&gpu, &x, &w, None, 1e-5, &mut y, &mut mean, &mut rstd)?;
    /// let mut scratch = norm_backward_scratch(&gpu, rows, cols)?;
    /// norm_backward(&gpu, &dy, &x, &w, Saved::LayerNorm { mean: &mean, rstd: &rstd }, Some(&dh),
    ///               NormGrads { dx: &mut dx, dw: &mut dw, db: None }, &mut scratch)?;
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn norm_backward<T: Elem>(
        gpu: &Gpu, dy: &Tensor<T>, x: &Tensor<T>, w: &Tensor<T>, saved: Saved, dres: Option<&Tensor<T>>,
        grads: NormGrads<T>, scratch: &mut Tensor<f32>,
    ) -> Result<()> {
        let (rows, cols) = matrix("x", x)?;
        expect_shape("dy", dy, &[rows, cols])?;
        expect_shape("w", w, &[cols])?;
        expect_shape("dx", grads.dx, &[rows, cols])?;
        expect_shape("dw", grads.dw, &[cols])?;
        if let Some(db) = &grads.db {
            expect_shape("db", db, &[cols])?;
        }
        if let Some(d) = dres {
            expect_shape("dres", d, &[rows, cols])?;
        }
        crate::norm::host::check_cols("norm_backward", rows, cols)?;
        let (mean, rstd, flags) = match saved {
            Saved::LayerNorm { mean, rstd } => (mean, rstd, 0),
            Saved::RmsNorm { rstd } => {
                if grads.db.is_some() {
                    return Err(Error::Invalid("norm_backward: RMSNorm has no bias, so no db".into()));
                }
                (rstd, rstd, RMS)
            }
        };
        expect_shape("mean", mean, &[rows])?;
        expect_shape("rstd", rstd, &[rows])?;
        let programs = norm_backward_programs(rows, cols, gpu.sm_count() as usize);
        if scratch.numel() < 2 * programs * cols {
            return Err(Error::Shape(format!(
                "norm_backward: scratch holds {} values; [{rows}, {cols}] needs {} (norm_backward_scratch makes it)",
                scratch.numel(),
                2 * programs * cols
            )));
        }
        if rows == 0 {
            gpu.fill_bytes(grads.dw, 0)?;
            return grads.db.map_or(Ok(()), |db| gpu.fill_bytes(db, 0));
        }
        let flags = flags | if dres.is_some() { ADD } else { 0 };
        norm_bwd_kernel::launch(gpu, norm_backward_config(cols), dy, x, w, mean, rstd, dres.unwrap_or(dy), grads.dx, scratch, rows, cols, programs, flags)?;
        col_sum(gpu, scratch, [programs, cols], [2 * cols, 0], grads.dw)?;
        grads.db.map_or(Ok(()), |db| col_sum(gpu, scratch, [programs, cols], [2 * cols, cols], db))
    }

    /// [`norm_backward`] in the CPU interpreter (`mean` empty for RMSNorm,
    /// `dres` empty for none), with `programs` programs (the GPU's count
    /// changes only the order of the sums): `(dx, dw, db)`.
    #[allow(clippy::too_many_arguments)]
    pub fn norm_backward_cpu<T: Elem>(
        dy: &[T], x: &[T], w: &[T], mean: &[f32], rstd: &[f32], dres: &[T], [rows, cols]: [usize; 2], sms: usize,
    ) -> (Vec<T>, Vec<f32>, Vec<f32>) {
        assert!(dy.len() == rows * cols && x.len() == rows * cols && w.len() == cols && rstd.len() == rows, "norm_backward_cpu: shapes");
        crate::norm::host::check_cols("norm_backward", rows, cols).unwrap_or_else(|e| panic!("{e}"));
        let rms = mean.is_empty();
        let flags = if rms { RMS } else { 0 } | if dres.is_empty() { 0 } else { ADD };
        let programs = norm_backward_programs(rows, cols, sms);
        let mut dx = vec![T::default(); rows * cols];
        let mut part = vec![0.0; 2 * programs * cols];
        let mean = if rms { rstd } else { mean };
        let dres = if dres.is_empty() { dy } else { dres };
        norm_bwd_kernel::cpu(norm_backward_config(cols), dy, x, w, mean, rstd, dres, &mut dx, &mut part, rows, cols, programs, flags);
        let dw = col_sum_cpu(&part, [programs, cols], [2 * cols, 0]);
        let db = col_sum_cpu(&part, [programs, cols], [2 * cols, cols]);
        (dx, dw, db)
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;
