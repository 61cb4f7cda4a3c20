//! CPU-interpreter checks of the FP8 GEMM against float64 of the stored
//! FP8 values: every config at odd M and N (K a multiple of 16, shorter
//! and longer than one 128-deep step), every scale kind, both formats and
//! their mixes, and the epilogue after the scales.
use super::*;
use crate::gemm::{Act, Bias, Epi};
use crate::reference;
use crate::testing::*;

/// FP8 operands `a` `[m, k]`, `b` `[n, k]` (values of a few units, as a
/// scaled tensor holds) and their float64 product.
fn operands<TA: Elem, TB: Elem>(m: usize, n: usize, k: usize) -> (Vec<TA>, Vec<TB>, Vec<f64>, u64) {
    let (mut rng, seed) = rng();
    let a: Vec<TA> = normal(&mut rng, m * k, 0.0, 2.0);
    let b: Vec<TB> = normal(&mut rng, n * k, 0.0, 2.0);
    let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    (a, b, ab, seed)
}

/// Scales of `rows` rows as the kernel takes them: none, one, or one a row.
fn scales(kind: ScaleKind, rows: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    match kind {
        ScaleKind::None => vec![],
        ScaleKind::Tensor => vec![0.37],
        ScaleKind::Row => normal::<f32>(rng, rows, 1.0, 0.5),
    }
}

fn at(s: &[f32], i: usize) -> f64 {
    match s.len() {
        0 => 1.0,
        1 => s[0] as f64,
        _ => s[i] as f64,
    }
}

fn check<TA: Elem, TB: Elem>(m: usize, n: usize, k: usize) {
    let (a, b, ab, seed) = operands::<TA, TB>(m, n, k);
    let (mut rng, _) = rng();
    let kinds = [ScaleKind::None, ScaleKind::Tensor, ScaleKind::Row];
    for cfg in 0..gemm_fp8_kernel::CONFIGS.len() {
        // Each config meets a different pair of scale kinds.
        let (ka, kb) = (kinds[cfg % 3], kinds[(cfg + 1) % 3]);
        let (sa, sb) = (scales(ka, m, &mut rng), scales(kb, n, &mut rng));
        let want: Vec<f64> = (0..m * n).map(|i| ab[i] * at(&sa, i / n) * at(&sb, i % n)).collect();
        let c = gemm_fp8_cpu(cfg, &a, &b, [m, n, k], &sa, &sb, &[], &[], Epi::NONE);
        assert_close(&c, &want, &format!("gemm_fp8<{} × {}> {m}×{n}×{k} cfg={cfg} scales {ka:?}/{kb:?} (seed {seed})", TA::NAME, TB::NAME));
    }
}

#[test]
fn gemm_fp8_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 16), (17, 9, 48), (129, 131, 144), (200, 300, 256)] {
        check::<F8E4M3, F8E4M3>(m, n, k);
        check::<F8E5M2, F8E5M2>(m, n, k);
        // A backward pass's mixes: e5m2 gradients by e4m3 weights, and the other way.
        check::<F8E5M2, F8E4M3>(m, n, k);
        check::<F8E4M3, F8E5M2>(m, n, k);
    }
}

#[test]
fn the_epilogue_follows_the_scales() {
    let (m, n, k) = (70, 45, 160);
    let (a, b, ab, seed) = operands::<F8E4M3, F8E4M3>(m, n, k);
    let (mut rng, _) = rng();
    let (sa, sb) = (scales(ScaleKind::Row, m, &mut rng), scales(ScaleKind::Row, n, &mut rng));
    let bias: Vec<bf16> = normal(&mut rng, n, 0.0, 3.0);
    let residual: Vec<bf16> = normal(&mut rng, m * n, 0.0, 2.0);
    let e = Epi { alpha: 0.5, beta: 0.0, bias: Bias::PerColumn, act: Act::Silu, residual: true };
    let want: Vec<f64> = (0..m * n)
        .map(|i| reference::epilogue(&e, ab[i] * at(&sa, i / n) * at(&sb, i % n), bias[i % n].to_f32() as f64, residual[i].to_f32() as f64, 0.0))
        .collect();
    let c = gemm_fp8_cpu(3, &a, &b, [m, n, k], &sa, &sb, &bias, &residual, e);
    assert_close(&c, &want, &format!("gemm_fp8 {e:?} (seed {seed})"));
    // k = 0 (a multiple of 16): no k-steps, the epilogue of zeros, every config.
    let want: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&e, 0.0, bias[i % n].to_f32() as f64, residual[i].to_f32() as f64, 0.0)).collect();
    for cfg in 0..gemm_fp8_kernel::CONFIGS.len() {
        let c = gemm_fp8_cpu::<F8E4M3, F8E5M2>(cfg, &[], &[], [m, n, 0], &sa, &sb, &bias, &residual, e);
        assert_close(&c, &want, &format!("gemm_fp8 {m}×{n}×0 {e:?} cfg={cfg} (seed {seed})"));
    }
}

/// e4m3 in, e4m3 out: the product through the epilogue, scaled into the
/// format and saturated, with the amax of the values before the scale.
#[test]
fn e4m3_outputs_match_float64() {
    let (m, n, k) = (70, 45, 160);
    let (a, b, ab, seed) = operands::<F8E4M3, F8E4M3>(m, n, k);
    let (mut rng, _) = rng();
    let bias: Vec<bf16> = normal(&mut rng, n, 0.0, 3.0);
    let e = Epi { alpha: 0.37, bias: Bias::PerColumn, act: Act::GeluTanh, ..Epi::NONE };
    let y: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&e, ab[i], bias[i % n].to_f32() as f64, 0.0, 0.0)).collect();
    let s = (500.0 / y.iter().fold(0.0f64, |t, v| t.max(v.abs()))) as f32;
    for cfg in 0..gemm_fp8_kernel::CONFIGS.len() {
        let ctx = format!("gemm_fp8<e4m3 → e4m3> cfg={cfg} (seed {seed})");
        let mut amax = vec![0.0f32];
        let c: Vec<F8E4M3> = gemm_fp8_cast_cpu(cfg, &a, &b, [m, n, k], [&[], &[], &[s]], &bias, &[], e, &mut amax);
        assert_e4m3_close(&c, &y.iter().map(|v| s as f64 * v).collect::<Vec<_>>(), &ctx);
        let (top, ok) = amax_matches(amax[0], &y, 1e-3);
        assert!(ok, "{ctx}: amax {} instead of {top}", amax[0]);
    }
}

#[test]
fn e5m2_outputs_are_refused() {
    let r = std::panic::catch_unwind(|| gemm_fp8_cast_cpu::<F8E4M3, F8E4M3, F8E5M2>(0, &[F8E4M3(0); 16], &[F8E4M3(0); 16], [1, 1, 16], [&[], &[], &[]], &[], &[], Epi::NONE, &mut []));
    let msg = *r.expect_err("an e5m2 output ran").downcast::<String>().unwrap();
    assert!(msg.contains("writes bf16 or e4m3"), "{msg}");
}

#[test]
fn mixed_operands_write_bf16_only() {
    let r = std::panic::catch_unwind(|| gemm_fp8_cast_cpu::<F8E5M2, F8E4M3, F8E4M3>(0, &[F8E5M2(0); 16], &[F8E4M3(0); 16], [1, 1, 16], [&[], &[], &[]], &[], &[], Epi::NONE, &mut []));
    let msg = *r.expect_err("an e4m3 output of mixed operands ran").downcast::<String>().unwrap();
    assert!(msg.contains("e5m2 × e4m3 operands writes bf16, not e4m3"), "{msg}");
}

#[test]
fn bf16_operands_are_refused() {
    let r = std::panic::catch_unwind(|| gemm_fp8_cpu(0, &[bf16::ZERO; 16], &[bf16::ZERO; 16], [1, 1, 16], &[], &[], &[], &[], Epi::NONE));
    let msg = *r.expect_err("bf16 operands ran").downcast::<String>().unwrap();
    assert!(msg.contains("e4m3 or e5m2"), "{msg}");
}
