//! CPU-interpreter checks of the mixture NLL and its gradient against
//! float64, at odd row counts, every component count up to the tile, and
//! with `log_sigma` at ±20 (no overflow, no NaN).
use super::*;
use crate::testing::*;

/// `(loss, d loss / d out)` in float64, `out` `[rows, k, 3]`.
fn reference(out: &[f64], y: &[f64], k: usize) -> (f64, Vec<f64>) {
    let rows = y.len();
    let (mut loss, mut grad) = (0.0, vec![0.0; out.len()]);
    let half_log_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
    for r in 0..rows {
        let c = &out[r * 3 * k..(r + 1) * 3 * k];
        let f = |j: usize, i: usize| c[3 * j + i];
        let lmax = (0..k).map(|j| f(j, 0)).fold(f64::NEG_INFINITY, f64::max);
        let lse_w = (0..k).map(|j| (f(j, 0) - lmax).exp()).sum::<f64>().ln() + lmax;
        let z: Vec<f64> = (0..k).map(|j| (y[r] - f(j, 1)) * (-f(j, 2)).exp()).collect();
        // ½z² reaches 1e19, past where even an f64 ulp is below 1: shift by
        // the smallest so that tied components keep their logits.
        let zz_min = z.iter().map(|z| 0.5 * z * z).fold(f64::INFINITY, f64::min);
        let a: Vec<f64> = (0..k).map(|j| f(j, 0) - lse_w - (0.5 * z[j] * z[j] - zz_min) - f(j, 2) - half_log_2pi).collect();
        let amax = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lp = a.iter().map(|v| (v - amax).exp()).sum::<f64>().ln() + amax;
        loss -= (lp - zz_min) / rows as f64;
        let s = 1.0 / rows as f64;
        for j in 0..k {
            let (gamma, pi) = ((a[j] - lp).exp(), (f(j, 0) - lse_w).exp());
            let g = &mut grad[r * 3 * k + 3 * j..];
            g[0] = s * (pi - gamma);
            g[1] = -s * gamma * z[j] * (-f(j, 2)).exp();
            g[2] = -s * gamma * (z[j] * z[j] - 1.0);
        }
    }
    (loss, grad)
}

/// Head outputs with `log_sigma` around `ls` (spread `ls_spread`).
fn inputs<T: Elem>(rows: usize, k: usize, ls: f32, ls_spread: f32) -> (Vec<T>, Vec<f32>, u64) {
    let (mut rng, seed) = rng();
    let logits: Vec<f32> = normal(&mut rng, rows * k, 0.0, 2.0);
    let mus: Vec<f32> = normal(&mut rng, rows * k, 0.0, 1.0);
    let lss: Vec<f32> = normal(&mut rng, rows * k, ls, ls_spread);
    let out = (0..rows * k).flat_map(|i| [logits[i], mus[i], lss[i].clamp(-20.0, 20.0)]).map(T::from_f32).collect();
    (out, normal(&mut rng, rows, 0.0, 1.5), seed)
}

fn check<T: Elem>(rows: usize, k: usize, ls: f32, ls_spread: f32) {
    let (out, y, seed) = inputs::<T>(rows, k, ls, ls_spread);
    check_on(&out, &y, k, &format!("gmm_nll<{}> rows={rows} k={k} log_sigma≈{ls} (seed {seed})", T::NAME));
}

fn check_on<T: Elem>(out: &[T], y: &[f32], k: usize, ctx: &str) {
    let (want, want_grad) = reference(&wide(out), &wide(y), k);
    for sms in [1, 3] {
        let loss = gmm_nll_cpu(out, y, k, sms);
        assert!(loss.is_finite() && ((loss as f64 - want) / want.abs().max(1.0)).abs() < 1e-5, "{ctx}: loss {loss} vs {want} (sms {sms})");
    }
    let grad = gmm_nll_backward_cpu(out, y, k, 1.0);
    assert!(grad.iter().all(|g| g.to_f32().is_finite()), "{ctx}: a gradient is not finite");
    // Each gradient is a few f32 roundings from T inputs, stored in T.
    let err = rel_err(&grad, &want_grad);
    assert!(err <= 4.0 * tolerance::<T>(), "{ctx}: gradient rel err {err:.2e}");
}

#[test]
fn matches_float64() {
    for (rows, k) in [(1, 1), (7, 3), (65, 10), (200, 16), (129, 5)] {
        check::<f32>(rows, k, 0.0, 0.5);
        check::<bf16>(rows, k, 0.0, 0.5);
    }
}

#[test]
fn extreme_log_sigma_stays_finite() {
    for ls in [-20.0, 20.0] {
        check::<f32>(70, 10, ls, 0.0);
        check::<bf16>(70, 10, ls, 0.0);
    }
    // Mixed: some components impossibly sharp, some very wide.
    check::<f32>(70, 10, 0.0, 15.0);
}

/// Two equally distant, impossibly sharp components share the posterior in
/// the ratio of their weights, though ½z² (1e17) hides the logits in f32.
#[test]
fn tied_sharp_components_keep_their_weights() {
    let (mut rng, seed) = rng();
    let rows = 9;
    let mut out = Vec::new();
    let y: Vec<f32> = normal(&mut rng, rows, 0.0, 1.5);
    for r in 0..rows {
        let mu = y[r] + 0.75 * (r as f32 - 4.0);
        let logits: Vec<f32> = normal(&mut rng, 3, 0.0, 2.0);
        out.extend([logits[0], mu, -20.0, logits[1], mu, -20.0, logits[2], mu + 0.5, -20.0]);
    }
    check_on(&out, &y, 3, &format!("gmm_nll<f32> tied components (seed {seed})"));
}

#[test]
fn refuses_bad_shapes() {
    assert!(host::check(&[5, 10, 2], &[5]).unwrap_err().to_string().contains("[rows, K, 3]"));
    assert!(host::check(&[5, 17, 3], &[5]).unwrap_err().to_string().contains("17 components"));
    assert!(host::check(&[5, 10, 3], &[4]).unwrap_err().to_string().contains("one target a row"));
}
