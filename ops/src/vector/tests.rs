//! CPU-interpreter checks of `add` and `swiglu` against float64, for every
//! config, odd lengths, and large and tiny magnitudes.
use super::*;
use crate::reference;
use crate::testing::*;

fn check<T: Elem>(kernel: &str, n: usize, scale: f32) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, n, 0.0, scale);
    let y: Vec<T> = normal(&mut rng, n, 0.0, scale);
    let configs = if kernel == "add" { add_kernel::CONFIGS.len() } else { swiglu_kernel::CONFIGS.len() };
    for cfg in 0..configs {
        let mut out = poisoned::<T>(n);
        let want = if kernel == "add" {
            add_kernel::cpu(cfg, &x, &y, &mut out, n);
            reference::add(&wide(&x), &wide(&y))
        } else {
            swiglu_kernel::cpu(cfg, &x, &y, &mut out, n);
            reference::swiglu(&wide(&x), &wide(&y))
        };
        let err = rel_err(&out, &want);
        assert!(err <= tolerance::<T>(), "{kernel}<{}> n={n} scale={scale} cfg={cfg}: rel err {err:.2e} (seed {seed})", T::NAME);
    }
}

#[test]
fn add_matches_float64_at_odd_lengths() {
    for n in [1, 7, 2049, 100_003] {
        check::<f32>("add", n, 1.0);
        check::<bf16>("add", n, 1.0);
        check::<f16>("add", n, 1.0);
    }
}

#[test]
fn add_keeps_relative_accuracy_at_extreme_magnitudes() {
    for scale in [1e-6, 1e6] {
        check::<f32>("add", 4099, scale);
        check::<bf16>("add", 4099, scale);
    }
}

#[test]
fn swiglu_matches_float64_at_odd_lengths() {
    for n in [1, 13, 8193, 65_537] {
        check::<f32>("swiglu", n, 1.0);
        check::<bf16>("swiglu", n, 1.0);
        check::<f16>("swiglu", n, 1.0);
    }
    check::<f32>("swiglu", 4099, 30.0);
    check::<f32>("swiglu", 4099, 1e-4);
}

#[test]
fn host_wrappers_agree_with_the_kernels() {
    let (mut rng, _) = rng();
    let x: Vec<f32> = normal(&mut rng, 333, 0.0, 1.0);
    let y: Vec<f32> = normal(&mut rng, 333, 0.0, 1.0);
    assert!(rel_err(&add_cpu(&x, &y), &reference::add(&wide(&x), &wide(&y))) < 1e-6);
    assert!(rel_err(&swiglu_cpu(&x, &y), &reference::swiglu(&wide(&x), &wide(&y))) < 1e-6);
}

#[test]
fn silu_matches_float64() {
    let (mut rng, seed) = rng();
    for n in [1, 2049, 10_007] {
        let x: Vec<bf16> = normal(&mut rng, n, 0.0, 4.0);
        let mut out = poisoned::<bf16>(n);
        silu_kernel::cpu(0, &x, &mut out, n);
        let want: Vec<f64> = wide(&x).iter().map(|v| v / (1.0 + (-v).exp())).collect();
        assert!(rel_err(&out, &want) <= tolerance::<bf16>(), "silu n={n} (seed {seed})");
    }
}
