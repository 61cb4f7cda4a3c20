//! CPU-interpreter checks of the row softmax against float64: every config
//! (so both the one-tile and the two-pass long-row paths run), odd shapes,
//! one row, rows longer than any tile, large and tiny magnitudes.
use super::*;
use crate::reference;
use crate::testing::*;

fn check<T: Elem>(rows: usize, cols: usize, scale: f32) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, 0.0, scale);
    let want = reference::softmax(&wide(&x), cols);
    for cfg in 0..softmax_kernel::CONFIGS.len() {
        let bn = softmax_kernel::CONFIGS[cfg].get("BN").unwrap();
        if cols > 4 * bn {
            continue; // many passes of a narrow tile: covered at smaller sizes, slow here
        }
        let mut y = poisoned::<T>(rows * cols);
        softmax_kernel::cpu(cfg, &x, &mut y, rows, cols);
        let err = rel_err(&y, &want);
        assert!(err <= tolerance::<T>(), "softmax<{}> {rows}×{cols} scale={scale} cfg={cfg}: rel err {err:.2e} (seed {seed})", T::NAME);
    }
}

#[test]
fn matches_float64_at_odd_shapes() {
    for (rows, cols) in [(1, 1), (1, 7), (3, 100), (37, 33), (5, 1000), (2, 3001)] {
        check::<f32>(rows, cols, 1.0);
        check::<bf16>(rows, cols, 1.0);
        check::<f16>(rows, cols, 1.0);
    }
}

#[test]
fn rows_longer_than_the_widest_tile() {
    check::<f32>(2, 40_001, 1.0);
    check::<bf16>(1, 16_385, 1.0);
}

#[test]
fn large_and_tiny_magnitudes() {
    // ×1000: one element dominates each row (exp would overflow without the max shift).
    check::<f32>(7, 513, 1000.0);
    check::<f32>(7, 513, 1e-4);
    check::<bf16>(7, 513, 1000.0);
}

#[test]
fn rows_sum_to_one() {
    let (mut rng, _) = rng();
    let (rows, cols) = (9, 777);
    let x: Vec<f32> = normal(&mut rng, rows * cols, 0.0, 5.0);
    for row in softmax_cpu(&x, rows, cols).chunks(cols) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn empty_inputs_are_empty_outputs() {
    assert!(softmax_cpu::<f32>(&[], 0, 7).is_empty());
    assert!(softmax_cpu::<bf16>(&[], 4, 0).is_empty());
}
