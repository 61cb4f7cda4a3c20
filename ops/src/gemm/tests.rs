//! CPU-interpreter checks of `gemm_nt` against float64 for every config, at
//! odd shapes (edges in M, N and K, K shorter than one BK step), and at
//! shapes whose rows are 16-byte aligned, so that interior windows take the
//! unmasked copy path.
use super::*;
use crate::reference;
use crate::testing::*;

fn check<T: Elem>(m: usize, n: usize, k: usize) {
    let (mut rng, seed) = rng();
    let a: Vec<T> = normal(&mut rng, m * k, 0.0, 1.0);
    let b: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
    let want = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    for cfg in 0..gemm_nt_kernel::CONFIGS.len() {
        let mut c = poisoned::<T>(m * n);
        gemm_nt_kernel::cpu(cfg, &a, &b, &mut c, m, n, k);
        let (err, worst) = (rel_err(&c, &want), max_err(&c, &want));
        let ctx = format!("gemm_nt<{}> {m}×{n}×{k} cfg={cfg} (seed {seed})", T::NAME);
        assert!(err <= tolerance::<T>(), "{ctx}: rel err {err:.2e}");
        assert!(worst <= 4.0 * tolerance::<T>(), "{ctx}: worst element off by {worst:.2e} of the rms");
    }
}

#[test]
fn gemm_nt_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 1), (17, 9, 5), (70, 33, 48), (129, 131, 77), (3, 260, 100), (200, 300, 136)] {
        check::<bf16>(m, n, k);
        check::<f16>(m, n, k);
    }
}

#[test]
fn host_wrapper_runs_the_default_config() {
    let (mut rng, _) = rng();
    let (m, n, k) = (33, 20, 40);
    let a: Vec<bf16> = normal(&mut rng, m * k, 0.0, 1.0);
    let b: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
    let err = rel_err(&gemm_nt_cpu(&a, &b, m, n, k), &reference::matmul_nt(&wide(&a), &wide(&b), m, n, k));
    assert!(err <= tolerance::<bf16>(), "rel err {err:.2e}");
}
