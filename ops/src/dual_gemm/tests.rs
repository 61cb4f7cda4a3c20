//! CPU-interpreter checks of the dual GEMM against float64, every config, odd shapes.
use super::*;
use crate::reference;
use crate::testing::*;

fn check<T: Elem>(m: usize, n: usize, k: usize) {
    let (mut rng, seed) = rng();
    let a: Vec<T> = normal(&mut rng, m * k, 0.0, 1.0);
    let b1: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
    let b2: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
    let (gate, up) = (reference::matmul_nt(&wide(&a), &wide(&b1), m, n, k), reference::matmul_nt(&wide(&a), &wide(&b2), m, n, k));
    let want = reference::swiglu(&gate, &up);
    for cfg in 0..dual_gemm_kernel::CONFIGS.len() {
        let mut c = poisoned::<T>(m * n);
        dual_gemm_kernel::cpu(cfg, &a, &b1, &b2, &mut c, m, n, k);
        assert_close(&c, &want, &format!("dual_gemm<{}> {m}×{n}×{k} cfg={cfg} (seed {seed})", T::NAME));
    }
    for cfg in 0..dual_gemm_tma_kernel::CONFIGS.len() {
        let mut c = poisoned::<T>(m * n);
        dual_gemm_tma_kernel::cpu(cfg, &a, &b1, &b2, &mut c, m, n, k, 0, 0, 0);
        assert_close(&c, &want, &format!("dual_gemm_tma<{}> {m}×{n}×{k} cfg={cfg} (seed {seed})", T::NAME));
    }
}

#[test]
fn dual_gemm_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 1), (17, 9, 5), (70, 33, 48), (129, 131, 77), (200, 136, 136)] {
        check::<bf16>(m, n, k);
        check::<f16>(m, n, k);
    }
    // No k-steps: silu(0)·0, zeros from every config of both kernels.
    check::<bf16>(37, 45, 0);
}

#[test]
fn host_wrapper_runs_the_default_config() {
    let (m, n, k) = (33, 20, 40);
    let (mut rng, seed) = rng();
    let (a, b1, b2): (Vec<bf16>, Vec<bf16>, Vec<bf16>) = (normal(&mut rng, m * k, 0.0, 1.0), normal(&mut rng, n * k, 0.0, 1.0), normal(&mut rng, n * k, 0.0, 1.0));
    let want = reference::swiglu(&reference::matmul_nt(&wide(&a), &wide(&b1), m, n, k), &reference::matmul_nt(&wide(&a), &wide(&b2), m, n, k));
    assert_close(&dual_gemm_cpu(&a, &b1, &b2, m, n, k), &want, &format!("dual_gemm_cpu (seed {seed})"));
}
