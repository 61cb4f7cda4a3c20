//! The online softmax: a running maximum and a running sum of exponentials
//! per row, so that a row can be seen one tile at a time (long rows in
//! `softmax`, key blocks in attention) and still be normalized exactly.
use crate::backend::held_rows;
use crate::mma::{acc_len, acc_rows_len, Acc, AccRows};
use crate::tile::{len, Col, Tile};
use crate::math;

/// Running row statistics over the tiles seen so far: `m` the maximum,
/// `l` the sum of `exp(x - m)`.
#[derive(Clone, Copy)]
pub struct OnlineSoftmax<const R: usize, const C: usize, const TH: usize>
where
    [(); held_rows(R, C, TH)]:,
{
    pub m: Col<f32, R, C, TH>,
    pub l: Col<f32, R, C, TH>,
}

impl<const R: usize, const C: usize, const TH: usize> OnlineSoftmax<R, C, TH>
where
    [(); len(R, C, TH)]:,
    [(); held_rows(R, C, TH)]:,
    [(); crate::backend::held_cols(C, TH)]:,
{
    #[inline(always)]
    pub fn new() -> Self {
        OnlineSoftmax { m: Col::splat(f32::NEG_INFINITY), l: Col::splat(0.0) }
    }

    /// Folds in a tile of scores (masked entries −∞). Returns `p = exp(s − m)`
    /// with the new maximum, and `alpha = exp(m_old − m_new)`, the factor by
    /// which anything accumulated from earlier tiles (such as P·V in
    /// attention) must be rescaled. Rows that have seen only −∞ keep `p = 0`.
    #[inline(always)]
    pub fn step(&mut self, s: Tile<f32, R, C, TH>) -> (Tile<f32, R, C, TH>, Col<f32, R, C, TH>) {
        let m_new = self.m.max(s.row_max());
        // exp(−∞ − (−∞)) would be NaN: a row with no finite score yet uses 0 as its shift.
        let shift = m_new.map(|m| if m == f32::NEG_INFINITY { 0.0 } else { m });
        let alpha = self.m.zip(shift, |m, sh| math::exp(m - sh));
        let p = s.zip_col(shift, |x, sh| math::exp(x - sh));
        self.l = self.l * alpha + p.row_sum();
        self.m = m_new;
        (p, alpha)
    }

    /// Folds in a tile of scores when only the statistics are needed.
    #[inline(always)]
    pub fn push(&mut self, s: Tile<f32, R, C, TH>) {
        self.step(s);
    }

    /// `softmax(s)` for a tile of the rows seen: `exp(s − m) / l`.
    #[inline(always)]
    pub fn probs(&self, s: Tile<f32, R, C, TH>) -> Tile<f32, R, C, TH> {
        let inv_l = self.l.recip();
        s.zip_col(self.m, |x, m| math::exp(x - m)) * inv_l
    }

    /// The log-sum-exp of each row, `m + log(l)` (what attention saves for its backward pass).
    #[inline(always)]
    pub fn lse(&self) -> Col<f32, R, C, TH> {
        self.m + self.l.log()
    }
}

/// The online softmax of an accumulator's rows (`mma::Acc` in the `WG`
/// layout: attention's scores `S = Q·Kᵀ`, one key block at a time). Scores
/// come in unscaled; `scale` (attention's `1/sqrt(d)`, positive) is folded
/// into the base-2 exponent, so each score costs one multiply-add and one
/// `ex2`: `p = 2^(s·c − m·c)` with `c = scale·log2(e)`, which is
/// `exp(scale·(s − m))`. `m` is the running maximum of the unscaled scores
/// (of the scores times each block's `k`, with [`AccSoftmax::step_scaled`]),
/// `l` the running sum of `p`.
#[derive(Clone, Copy)]
pub struct AccSoftmax<const M: usize, const TH: usize>
where
    [(); acc_rows_len(M, TH)]:,
{
    pub m: AccRows<M, TH>,
    pub l: AccRows<M, TH>,
    c: f32,
    /// `p`'s gain, as a power of two ([`AccSoftmax::with_gain`]).
    g: f32,
}

impl<const M: usize, const TH: usize> AccSoftmax<M, TH>
where
    [(); acc_rows_len(M, TH)]:,
{
    #[inline(always)]
    pub fn new(scale: f32) -> Self {
        Self::with_gain(scale, 0.0)
    }

    /// [`AccSoftmax::new`] whose `p` come out `2^gain` times larger (and `l`
    /// with them, so that `O/l` and the log-sum-exp are unchanged): room
    /// below for the small probabilities of a `p` rounded to 8 bits.
    #[inline(always)]
    pub fn with_gain(scale: f32, gain: f32) -> Self {
        AccSoftmax { m: AccRows::splat(f32::NEG_INFINITY), l: AccRows::splat(0.0), c: scale * core::f32::consts::LOG2_E, g: gain }
    }

    /// Folds in a block of scores (masked entries −∞). Returns `p` with the
    /// new maximum and `alpha`, the factor by which anything accumulated from
    /// earlier blocks (`P·V`) must be rescaled. Rows that have seen only −∞
    /// keep `p = 0`.
    #[inline(always)]
    pub fn step<const N: usize>(&mut self, s: Acc<M, N, TH, true>) -> (Acc<M, N, TH, true>, AccRows<M, TH>)
    where
        [(); acc_len(M, N, TH)]:,
    {
        self.step_scaled(s, 1.0)
    }

    /// [`AccSoftmax::step`] for a block whose scores are to be multiplied by
    /// `k` (positive) first: an FP8 block's dequantization scale, folded into
    /// the exponent's multiply.
    #[inline(always)]
    pub fn step_scaled<const N: usize>(&mut self, s: Acc<M, N, TH, true>, k: f32) -> (Acc<M, N, TH, true>, AccRows<M, TH>)
    where
        [(); acc_len(M, N, TH)]:,
    {
        let (c, kc, g) = (self.c, self.c * k, self.g);
        let m_new = self.m.zip(s.row_max(), |m, x| math::max(m, x * k));
        // exp(−∞ − (−∞)) would be NaN: a row with no finite score yet uses 0 as its shift.
        let shift = m_new.map(|m| if m == f32::NEG_INFINITY { 0.0 } else { m * c });
        let alpha = self.m.zip(shift, |m, sh| math::exp2(m * c - sh));
        let p = s.map_rows(&shift, |x, sh| math::exp2(x * kc - (sh - g)));
        self.l = self.l.zip(alpha, |l, a| l * a).zip(p.row_sum(), |l, ps| l + ps);
        self.m = m_new;
        (p, alpha)
    }

    /// `1/l` of each row, 0 for a row that saw no key (its output is then 0).
    #[inline(always)]
    pub fn inv_l(&self) -> AccRows<M, TH> {
        self.l.map(|l| if l == 0.0 { 0.0 } else { math::recip(l) })
    }

    /// The natural log-sum-exp of each row's scaled scores, `scale·m + log(l)`
    /// (what attention saves for its backward pass); −∞ for a row that saw no key.
    #[inline(always)]
    pub fn lse(&self) -> AccRows<M, TH> {
        let c = self.c;
        let g = self.g;
        self.m.zip(self.l, |m, l| if l == 0.0 { f32::NEG_INFINITY } else { (m * c + math::log2(l) - g) * core::f32::consts::LN_2 })
    }
}
