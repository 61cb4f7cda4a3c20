//! Training data for a 1-D neural process: functions drawn from a Gaussian
//! process with an RBF kernel, observed at random points, seeded.
//!
//! A draw is exact in distribution only as the number of features grows:
//! each function is a random Fourier feature expansion (Rahimi and Recht),
//! `f(x) = √(2/J)·Σ_j a_j·cos(ω_j·x + b_j)` with `ω_j ~ N(0, 1/ℓ²)`,
//! `b_j ~ U(0, 2π)`, `a_j ~ N(0, 1)`, whose covariance tends to
//! `exp(−(x − x')²/(2ℓ²))`. It costs `O(points · J)`, where the Cholesky
//! factor of an exact draw would cost `O(points³)`: a million-point batch
//! in well under a second, where the exact one would not finish.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustile_ops::testing::standard_normal as normal;

/// Features a function is built of.
pub const FEATURES: usize = 256;
/// Observation noise (standard deviation) added to every `y`.
pub const NOISE: f32 = 0.05;
/// Inputs a token has: `[x, y, is_target]` padded with zeros to 8 (a
/// 16-byte row of bf16, so the embedding GEMM reads whole chunks).
pub const TOKEN_WIDTH: usize = 8;

/// One batch: `batch` functions, each seen at `context` points with `y` and
/// asked at `targets` points.
pub struct Batch {
    /// `[batch·(context + targets), TOKEN_WIDTH]`: per function its context
    /// tokens `[x, y, 0]`, then its target tokens `[x, 0, 1]`.
    pub tokens: Vec<f32>,
    /// `[batch·targets]`: the `y` of every target, function by function.
    pub y: Vec<f32>,
}

/// A reproducible stream of batches.
pub struct GpData {
    rng: StdRng,
    pub batch: usize,
    pub context: usize,
    pub targets: usize,
}

impl GpData {
    pub fn new(seed: u64, batch: usize, context: usize, targets: usize) -> GpData {
        GpData { rng: StdRng::seed_from_u64(seed), batch, context, targets }
    }

    /// The next batch: length scales uniform in [0.1, 1], `x` uniform in [−2, 2].
    pub fn next_batch(&mut self) -> Batch {
        let (m, n) = (self.context, self.targets);
        let mut tokens = vec![0.0; self.batch * (m + n) * TOKEN_WIDTH];
        let mut y = Vec::with_capacity(self.batch * n);
        for b in 0..self.batch {
            let ell: f32 = self.rng.gen_range(0.1..1.0);
            let feats: Vec<(f32, f32, f32)> =
                (0..FEATURES).map(|_| (normal(&mut self.rng) / ell, self.rng.gen_range(0.0..std::f32::consts::TAU), normal(&mut self.rng))).collect();
            let norm = (2.0 / FEATURES as f32).sqrt();
            for i in 0..m + n {
                let x: f32 = self.rng.gen_range(-2.0..2.0);
                let f: f32 = norm * feats.iter().map(|(w, ph, a)| a * (w * x + ph).cos()).sum::<f32>();
                let obs = f + NOISE * normal(&mut self.rng);
                let tok = &mut tokens[(b * (m + n) + i) * TOKEN_WIDTH..][..TOKEN_WIDTH];
                tok[0] = x;
                if i < m {
                    tok[1] = obs;
                } else {
                    tok[2] = 1.0;
                    y.push(obs);
                }
            }
        }
        Batch { tokens, y }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_seeded_and_laid_out() {
        let (mut a, mut b) = (GpData::new(7, 3, 5, 4), GpData::new(7, 3, 5, 4));
        let (x, z) = (a.next_batch(), b.next_batch());
        assert_eq!(x.tokens, z.tokens);
        assert_eq!(x.tokens.len(), 3 * 9 * TOKEN_WIDTH);
        assert_eq!(x.y.len(), 12);
        // Context tokens carry y and flag 0; targets carry 0 and flag 1, their y kept apart.
        let tok = |i: usize| &x.tokens[i * TOKEN_WIDTH..(i + 1) * TOKEN_WIDTH];
        assert!(tok(0)[2] == 0.0 && tok(5)[1] == 0.0 && tok(5)[2] == 1.0 && tok(9)[2] == 0.0);
        assert!(tok(3)[3..].iter().all(|&v| v == 0.0));
        assert_ne!(GpData::new(8, 3, 5, 4).next_batch().tokens, x.tokens);
    }

    /// Nearby points of one function are correlated, far ones much less: a GP with an RBF kernel.
    #[test]
    fn functions_are_smooth() {
        let mut d = GpData::new(1, 200, 2, 0);
        let (mut near, mut n) = (0.0, 0);
        for _ in 0..5 {
            let b = d.next_batch();
            for f in 0..200 {
                let t = &b.tokens[f * 2 * TOKEN_WIDTH..];
                let (x0, y0, x1, y1) = (t[0], t[1], t[TOKEN_WIDTH], t[TOKEN_WIDTH + 1]);
                if (x0 - x1).abs() < 0.02 {
                    near += (y0 - y1).abs();
                    n += 1;
                }
            }
        }
        // Within 0.02 of each other the values differ by little more than the noise.
        assert!(n > 0 && near / (n as f32) < 0.2, "{} over {n} pairs", near / n.max(1) as f32);
    }
}
