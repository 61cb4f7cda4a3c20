//! The Gaussian-mixture negative log-likelihood of a mixture-density head,
//! forward and backward, one kernel each.
//!
//! Each row (a target) has `K` components of `(logit, mu, log_sigma)`,
//! stored `[rows, K, 3]` as the grouped heads write them, and a target `y`:
//!
//! `log w_k = log_softmax(logit)_k`,
//! `log N_k = −½·((y − mu_k)·exp(−log_sigma_k))² − log_sigma_k − ½·log 2π`,
//! `loss = −mean_rows(logsumexp_k(log w_k + log N_k))`.
//!
//! A program reads the three fields as three `[BM, KP]` tiles (column
//! stride 3), so every step is elementwise or a row reduction, and nothing
//! of `[rows, K, 3]` is written but the gradient. Both log-sum-exps subtract
//! their row's maximum first: with `log_sigma` in ±20 a squared z reaches
//! 1e19, far inside f32, and `exp` only ever sees values ≤ 0. The mean is
//! partial sums per program added in a fixed order ([`col_sum_kernel`]),
//! no atomics.
//!
//! [`col_sum_kernel`]: crate::reduce::col_sum_kernel
use rustile::prelude::*;

/// `½·log 2π`.
const HALF_LOG_2PI: f32 = 0.918_938_5;

/// The per-row quantities both kernels need, for the rows `r0..r0+BM`:
/// `(logit, z, e^{−log_sigma}, log w + log N + m, lse of the logits,
/// log p + m, m)` with `m` the row's smallest `½z²` (the shift cancels in
/// the posterior). Columns past `k` are −∞ in `logit` and in `log w + log N`.
macro_rules! mixture_rows {
    ($out:expr, $y:expr, $rows:expr, $k:expr, $r0:expr, $BM:ident, $KP:ident) => {{
        let field = |f: usize| BlockPtr::<T, $BM, $KP>::new($out.offset(f), [$rows, $k], [3 * $k, 3], [$r0, 0]);
        let inside = Tile::<bool, $BM, $KP>::from_fn(|_, c| c < $k);
        let ninf = Tile::<f32, $BM, $KP>::splat(f32::NEG_INFINITY);
        let logit = inside.select(load(&field(0)).cast::<f32>(), ninf);
        let mu = load(&field(1)).cast::<f32>();
        let ls = load(&field(2)).cast::<f32>();
        let y = Col::<f32, $BM, $KP>::load($y, $r0, $rows);
        let lmax = logit.row_max();
        let lse_w = (logit - lmax).exp().row_sum().log() + lmax;
        let inv_sigma = (-ls).exp();
        let z = (mu - y) * inv_sigma * -1.0;
        // ½z² reaches 1e19, where an f32 ulp dwarfs the logits: two
        // components at the same z would lose their weights. Their offset
        // from the row's smallest ½z² is exact (0) for such a tie.
        let half_zz = 0.5 * z * z;
        let zz_min = inside.select(half_zz, Tile::splat(f32::INFINITY)).reduce_rows(f32::INFINITY, rustile::math::min);
        let a = logit - lse_w - (half_zz - zz_min) - ls - HALF_LOG_2PI;
        let amax = a.row_max();
        let lp = (a - amax).exp().row_sum().log() + amax;
        (logit, z, inv_sigma, a, lse_w, lp, zz_min)
    }};
}

// ---- kernels ---------------------------------------------------------------------------

#[kernel(
    configs = [(BM = 64, KP = 16, WARPS = 4)],
    grid = [programs],
    dtypes = [bf16, f32],
)]
/// The loss's partial sums: program `p` walks row blocks `p, p + P, …` and
/// writes `−scale·Σ log p` of its rows to `part[p·KP]` (`part` is
/// `[programs, KP]`; the other columns get zeros). `k ≤ KP` components.
pub fn gmm_nll_kernel<T: Elem>(out: Ptr<T>, y: Ptr<f32>, part: PtrMut<f32>, rows: usize, k: usize, programs: usize, scale: f32) {
    let p = program_id(0);
    let mut acc = Tile::<f32, BM, KP>::zeros();
    let mut blk = p;
    while blk * BM < rows {
        let r0 = blk * BM;
        let (.., lp, zz_min) = mixture_rows!(out, y, rows, k, r0, BM, KP);
        let lp = lp - zz_min;
        // Each row's log p once (column 0), for rows that exist.
        let first = Tile::<bool, BM, KP>::from_fn(|r, c| c == 0 && r0 + r < rows);
        acc = acc + first.select(Tile::zeros() + lp, Tile::zeros());
        blk += programs;
    }
    (acc.col_sum() * -scale).store(part.offset(p * KP), 0, KP);
}

#[kernel(
    configs = [(BM = 64, KP = 16, WARPS = 4)],
    grid = [cdiv(rows, BM)],
    dtypes = [bf16, f32],
)]
/// The gradient of `scale·Σ_rows (−log p)` with respect to every head
/// output, `dout` `[rows, K, 3]` (`scale` is the loss's upstream gradient
/// over the rows: `1/rows` for the mean). With `γ` the posterior
/// `exp(log w + log N − log p)` and `π = softmax(logit)`:
/// `∂logit = scale·(π − γ)`, `∂mu = −scale·γ·z·e^{−log_sigma}`,
/// `∂log_sigma = −scale·γ·(z² − 1)`.
pub fn gmm_nll_bwd_kernel<T: Elem>(out: Ptr<T>, y: Ptr<f32>, dout: PtrMut<T>, rows: usize, k: usize, scale: f32) {
    let r0 = program_id(0) * BM;
    let (logit, z, inv_sigma, a, lse_w, lp, _) = mixture_rows!(out, y, rows, k, r0, BM, KP);
    let gamma = (a - lp).exp();
    let pi = (logit - lse_w).exp();
    let field = |f: usize| BlockPtr::<T, BM, KP>::new(dout.offset(f), [rows, k], [3 * k, 3], [r0, 0]);
    store(&field(0), &((pi - gamma) * scale).cast::<T>());
    store(&field(1), &(gamma * z * inv_sigma * -scale).cast::<T>());
    store(&field(2), &(gamma * (z * z - 1.0) * -scale).cast::<T>());
}

// ---- host API --------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::expect_shape;
    use crate::reduce::{col_sum_cpu, col_sum_scaled};
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// Components a row may have (the tile's width).
    pub const MAX_COMPONENTS: usize = 16;

    fn programs(rows: usize, sms: usize) -> usize {
        rows.div_ceil(64).clamp(1, 2 * sms.max(1))
    }

    pub(super) fn check(out: &[usize], y: &[usize]) -> Result<(usize, usize)> {
        let (rows, k) = match *out {
            [rows, k, 3] => (rows, k),
            _ => return Err(Error::Shape(format!("gmm_nll: out must be [rows, K, 3] (logit, mu, log_sigma per component); it is {out:?}"))),
        };
        if k == 0 || k > MAX_COMPONENTS {
            return Err(Error::Shape(format!("gmm_nll: {k} components; 1 to {MAX_COMPONENTS} are supported")));
        }
        if y != [rows] {
            return Err(Error::Shape(format!("gmm_nll: y must be [{rows}] (one target a row); it is {y:?}")));
        }
        Ok((rows, k))
    }

    /// The scratch [`gmm_nll`] needs for `rows` on `gpu` (partial sums).
    pub fn gmm_nll_scratch(gpu: &Gpu, rows: usize) -> Result<Tensor<f32>> {
        gpu.alloc(&[programs(rows, gpu.sm_count() as usize), MAX_COMPONENTS])
    }

    /// `loss[0] = −mean_rows log p(y | mixture)` of the head outputs `out`
    /// `[rows, K, 3]` and targets `y` `[rows]` (the module doc has the
    /// formula). `scratch` is [`gmm_nll_scratch`]'s.
    pub fn gmm_nll<T: Elem>(gpu: &Gpu, out: &Tensor<T>, y: &Tensor<f32>, loss: &mut Tensor<f32>, scratch: &mut Tensor<f32>) -> Result<()> {
        let (rows, k) = check(out.shape(), y.shape())?;
        expect_shape("out", out, &[rows, k, 3])?;
        expect_shape("loss", loss, &[1])?;
        let p = programs(rows, gpu.sm_count() as usize);
        if scratch.numel() < p * MAX_COMPONENTS {
            return Err(Error::Shape(format!("gmm_nll: scratch holds {} values, {} needed (gmm_nll_scratch makes it)", scratch.numel(), p * MAX_COMPONENTS)));
        }
        if rows == 0 {
            return Err(Error::Shape("gmm_nll: the mean over 0 rows is undefined".into()));
        }
        gmm_nll_kernel::launch(gpu, 0, out, y, scratch, rows, k, p, 1.0 / rows as f32)?;
        col_sum_scaled(gpu, scratch, [p, 1], [MAX_COMPONENTS, 0], 1.0, loss)
    }

    /// The gradient of [`gmm_nll`]'s loss times `dloss` with respect to `out`:
    /// `dout` (out's shape).
    pub fn gmm_nll_backward<T: Elem>(gpu: &Gpu, out: &Tensor<T>, y: &Tensor<f32>, dloss: f32, dout: &mut Tensor<T>) -> Result<()> {
        let (rows, k) = check(out.shape(), y.shape())?;
        expect_shape("out", out, &[rows, k, 3])?;
        expect_shape("dout", dout, &[rows, k, 3])?;
        if rows == 0 {
            return Ok(());
        }
        gmm_nll_bwd_kernel::launch(gpu, 0, out, y, dout, rows, k, dloss / rows as f32)
    }

    /// [`gmm_nll`] in the CPU interpreter, with the programs of a GPU of `sms` SMs.
    pub fn gmm_nll_cpu<T: Elem>(out: &[T], y: &[f32], k: usize, sms: usize) -> f32 {
        let rows = y.len();
        assert_eq!(out.len(), rows * k * 3, "gmm_nll_cpu: out holds {} values, not [{rows}, {k}, 3]", out.len());
        check(&[rows, k, 3], &[rows]).unwrap_or_else(|e| panic!("{e}"));
        assert!(rows > 0, "gmm_nll_cpu: the mean over 0 rows is undefined");
        let p = programs(rows, sms);
        let mut part = vec![0.0; p * MAX_COMPONENTS];
        gmm_nll_kernel::cpu(0, out, y, &mut part, rows, k, p, 1.0 / rows as f32);
        col_sum_cpu(&part, [p, 1], [MAX_COMPONENTS, 0])[0]
    }

    /// [`gmm_nll_backward`] in the CPU interpreter.
    pub fn gmm_nll_backward_cpu<T: Elem>(out: &[T], y: &[f32], k: usize, dloss: f32) -> Vec<T> {
        let rows = y.len();
        assert_eq!(out.len(), rows * k * 3, "gmm_nll_backward_cpu: out holds {} values, not [{rows}, {k}, 3]", out.len());
        check(&[rows, k, 3], &[rows]).unwrap_or_else(|e| panic!("{e}"));
        let mut dout = vec![T::default(); out.len()];
        gmm_nll_bwd_kernel::cpu(0, out, y, &mut dout, rows, k, dloss / rows.max(1) as f32);
        dout
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
