//! CPU-interpreter checks of TriMul against float64, elementwise with
//! rtol = atol = 2e-2 (GPU MODE's check): x normal and Cauchy(0, 2), with
//! and without a mask, at odd sizes (N = 1, 7, 33), dim 16 and 128 (and
//! 200, 600: the other projection configs), hidden 128 and 40.
use super::*;
use crate::testing::*;

fn check(batch: usize, n: usize, dim: usize, hidden: usize, cauchy_x: bool, masked: bool) {
    let (mut rng, seed) = rng();
    let dims = Dims { batch, n, dim, hidden };
    let case = TriMulCase::new(&mut rng, dims, cauchy_x, masked);
    let out = trimul_cpu(&case.x, case.mask.as_deref(), &case.params(|v| v.as_slice()), dims);
    let ctx = format!("trimul {dims:?} cauchy={cauchy_x} mask={masked} (seed {seed})");
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
fn refuses_sizes_it_cannot_hold() {
    assert!(Dims { batch: 1, n: 4, dim: 16, hidden: max_hidden() + 1 }.check().unwrap_err().contains("hidden"));
    assert!(Dims { batch: 1, n: 4, dim: 4096, hidden: 128 }.check().unwrap_err().contains("dim"));
}
