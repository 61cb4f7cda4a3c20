//! CPU-interpreter checks of LayerNorm and RMSNorm against float64: every
//! config (one-tile and long-row paths), odd shapes, with and without bias,
//! a large common offset (where a naive variance cancels), tiny and large
//! scales; the saved statistics too.
use super::*;
use crate::reference;
use crate::testing::*;

fn check_ln<T: Elem>(rows: usize, cols: usize, offset: f32, scale: f32, bias: bool) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, offset, scale);
    let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
    let b: Vec<T> = normal(&mut rng, cols, 0.0, 0.5);
    let eps = 1e-5;
    let (want, want_mean, want_rstd) = reference::layer_norm(&wide(&x), cols, &wide(&w), bias.then(|| wide(&b)).as_deref(), eps as f64);
    for cfg in 0..layer_norm_kernel::CONFIGS.len() {
        if cols > 4 * layer_norm_kernel::CONFIGS[cfg].get("BN").unwrap() {
            continue;
        }
        let mut y = poisoned::<T>(rows * cols);
        let (mut mean, mut rstd) = (poisoned::<f32>(rows), poisoned::<f32>(rows));
        layer_norm_kernel::cpu(cfg, &x, &w, &b, &mut y, &mut mean, &mut rstd, rows, cols, eps, bias as u32);
        let ctx = format!("layer_norm<{}> {rows}×{cols} offset={offset} scale={scale} bias={bias} cfg={cfg} (seed {seed})", T::NAME);
        // x − mean loses |offset|/scale ulps to the rounding of the mean itself, in any f32 code.
        let tol = tolerance::<T>() + 4.0 * (offset / scale).abs() as f64 * f32::EPSILON as f64;
        let err = rel_err(&y, &want);
        assert!(err <= tol, "{ctx}: y rel err {err:.2e} > {tol:.1e}");
        let mean_err = mean_err(&mean, &want_mean, &want_rstd);
        assert!(mean_err < 1e-5, "{ctx}: mean error {mean_err:.2e} of the row's scale");
        assert!(rel_err(&rstd, &want_rstd) < 1e-4, "{ctx}: rstd rel err {:.2e}", rel_err(&rstd, &want_rstd));
    }
}

fn check_rms<T: Elem>(rows: usize, cols: usize, scale: f32) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, 0.0, scale);
    let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
    let eps = 1e-6;
    let (want, want_rstd) = reference::rms_norm(&wide(&x), cols, &wide(&w), eps as f64);
    for cfg in 0..rms_norm_kernel::CONFIGS.len() {
        if cols > 4 * rms_norm_kernel::CONFIGS[cfg].get("BN").unwrap() {
            continue;
        }
        let mut y = poisoned::<T>(rows * cols);
        let mut rstd = poisoned::<f32>(rows);
        rms_norm_kernel::cpu(cfg, &x, &w, &mut y, &mut rstd, rows, cols, eps);
        let ctx = format!("rms_norm<{}> {rows}×{cols} scale={scale} cfg={cfg} (seed {seed})", T::NAME);
        let err = rel_err(&y, &want);
        assert!(err <= tolerance::<T>(), "{ctx}: y rel err {err:.2e}");
        assert!(rel_err(&rstd, &want_rstd) < 1e-4, "{ctx}: rstd rel err {:.2e}", rel_err(&rstd, &want_rstd));
    }
}

#[test]
fn layer_norm_matches_float64_at_odd_shapes() {
    // Odd shapes, plus rows that fill a tile exactly (LayerNorm's unmasked path).
    for (rows, cols) in [(1, 8), (1, 7), (3, 100), (37, 33), (5, 1000), (2, 3001), (7, 128), (3, 1024)] {
        for bias in [false, true] {
            check_ln::<f32>(rows, cols, 0.0, 1.0, bias);
            check_ln::<bf16>(rows, cols, 0.0, 1.0, bias);
        }
        check_ln::<f16>(rows, cols, 0.0, 1.0, true);
    }
}

#[test]
fn layer_norm_long_rows_and_hard_magnitudes() {
    check_ln::<f32>(2, 40_001, 0.0, 1.0, true);
    // A common offset 1000× the spread: E[x²] − E[x]² would lose every digit.
    check_ln::<f32>(4, 5000, 1000.0, 1.0, true);
    check_ln::<f32>(4, 20_000, 1000.0, 1.0, false);
    check_ln::<f32>(3, 333, 0.0, 1e-3, true);
    check_ln::<f32>(3, 333, 0.0, 1e4, true);
}

#[test]
fn rms_norm_matches_float64() {
    for (rows, cols) in [(1, 8), (1, 7), (3, 100), (37, 33), (5, 1000), (2, 3001)] {
        check_rms::<f32>(rows, cols, 1.0);
        check_rms::<bf16>(rows, cols, 1.0);
        check_rms::<f16>(rows, cols, 1.0);
    }
    check_rms::<f32>(2, 40_001, 1.0);
    check_rms::<f32>(3, 333, 1e-3);
    check_rms::<f32>(3, 333, 1e4);
}

#[test]
fn host_wrappers_save_statistics() {
    let (mut rng, _) = rng();
    let (rows, cols) = (6, 257);
    let x: Vec<f32> = normal(&mut rng, rows * cols, 2.0, 3.0);
    let w: Vec<f32> = normal(&mut rng, cols, 1.0, 0.1);
    let (_, stats) = layer_norm_cpu(&x, rows, cols, &w, None, 1e-5);
    let (_, mean, rstd) = reference::layer_norm(&wide(&x), cols, &wide(&w), None, 1e-5);
    assert!(rel_err(&stats.mean, &mean) < 1e-5 && rel_err(&stats.rstd, &rstd) < 1e-4);
    let (_, stats) = rms_norm_cpu(&x, rows, cols, &w, 1e-6);
    assert!(stats.mean.is_empty() && stats.rstd.len() == rows);
}

/// No rows is nothing to do; a row of no elements has no statistics, and is refused.
#[test]
fn empty_inputs() {
    let (y, stats) = layer_norm_cpu::<f32>(&[], 0, 7, &[1.0; 7], None, 1e-5);
    assert!(y.is_empty() && stats.mean.is_empty() && stats.rstd.is_empty());
    let (y, stats) = rms_norm_cpu::<bf16>(&[], 0, 3001, &vec![bf16::ONE; 3001], 1e-6);
    assert!(y.is_empty() && stats.rstd.is_empty());
    assert!(host::check_cols("layer_norm", 0, 0).is_ok());
    for op in ["layer_norm", "rms_norm"] {
        let err = host::check_cols(op, 3, 0).unwrap_err().to_string();
        assert!(err.contains(op) && err.contains("cols must be at least 1"), "{err}");
    }
}

// ---- backward ----------------------------------------------------------------------------

/// The backward at `rows × cols` against float64, with statistics from the
/// forward kernel (as a training step has them), with and without the
/// residual gradient, for `sms` GPU SMs (which sets the programs).
fn check_backward<T: Elem>(rows: usize, cols: usize, rms: bool, sms: usize) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, 0.5, 2.0);
    let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
    let dy: Vec<T> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let dres: Vec<T> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let eps = 1e-5;
    let stats = if rms { rms_norm_cpu(&x, rows, cols, &w, eps).1 } else { layer_norm_cpu(&x, rows, cols, &w, None, eps).1 };
    let (want_dx, want_dw, want_db) = reference::norm_backward(&wide(&dy), &wide(&x), cols, &wide(&w), eps as f64, rms);
    for add in [false, true] {
        let ctx = format!("norm_backward<{}> {rows}×{cols} rms={rms} add={add} sms={sms} (seed {seed})", T::NAME);
        let (dx, dw, db) = norm_backward_cpu(&dy, &x, &w, &stats.mean, &stats.rstd, if add { &dres } else { &[] }, [rows, cols], sms);
        let want: Vec<f64> = if add { want_dx.iter().zip(wide(&dres)).map(|(a, b)| a + b).collect() } else { want_dx.clone() };
        // dx subtracts two means from g: a few roundings of T in each term.
        let tol = 4.0 * tolerance::<T>();
        let err = rel_err(&dx, &want);
        assert!(err <= tol, "{ctx}: dx rel err {err:.2e} > {tol:.1e}");
        // The weight gradients are f32 sums of products of T inputs.
        assert!(rel_err(&dw, &want_dw) < 1e-4, "{ctx}: dw rel err {:.2e}", rel_err(&dw, &want_dw));
        if !rms {
            assert!(rel_err(&db, &want_db) < 1e-4, "{ctx}: db rel err {:.2e}", rel_err(&db, &want_db));
        }
    }
}

#[test]
fn norm_backward_matches_float64() {
    // Short rows (several programs per block stride, odd counts), a row
    // exactly one tile, and rows longer than the widest tile (two passes).
    for (rows, cols, sms) in [(1, 7, 1), (37, 33, 2), (50, 512, 3), (9, 1000, 2), (5, 4096, 1), (3, 9001, 2)] {
        for rms in [false, true] {
            check_backward::<f32>(rows, cols, rms, sms);
            check_backward::<bf16>(rows, cols, rms, sms);
        }
    }
    check_backward::<f16>(17, 200, false, 1);
}

/// The partial sums are added in a fixed order: the same inputs give the same bits.
#[test]
fn norm_backward_is_deterministic() {
    let (mut rng, _) = rng();
    let (rows, cols) = (300, 96);
    let x: Vec<bf16> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let dy: Vec<bf16> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let w: Vec<bf16> = normal(&mut rng, cols, 1.0, 0.5);
    let (_, s) = layer_norm_cpu(&x, rows, cols, &w, None, 1e-5);
    let run = || norm_backward_cpu(&dy, &x, &w, &s.mean, &s.rstd, &[], [rows, cols], 4);
    let (a, b) = (run(), run());
    assert!(a.1.iter().zip(&b.1).all(|(p, q)| p.to_bits() == q.to_bits()));
    assert!(a.2.iter().zip(&b.2).all(|(p, q)| p.to_bits() == q.to_bits()));
}
