//! The online softmax: a running maximum and a running sum of exponentials
//! per row, so that a row can be seen one tile at a time (long rows in
//! `softmax`, key blocks in attention) and still be normalized exactly.
use crate::backend::held_rows;
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
