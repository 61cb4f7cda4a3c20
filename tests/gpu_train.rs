//! The training ops on the GPU, against float64 (or, where the reference
//! is the interpreter's own tested output, against the CPU interpreter run
//! through the same host API): norm backward, the mixture NLL and its
//! gradient, AdamW, the SiLU-backward epilogue in every GEMM kernel and
//! layout, SiLU. Outputs are poisoned first; sizes are odd.
use rustile::{bf16, Elem};
use rustile_host::{Gpu, Tensor};
use rustile_ops::adamw::{adamw_step, adamw_step_cpu, AdamW, AdamWState, HYPER_LEN};
use rustile_ops::gemm::{self, Act, Epi, Epilogue, Transpose};
use rustile_ops::gmm_loss::{gmm_nll, gmm_nll_backward, gmm_nll_backward_cpu, gmm_nll_cpu, gmm_nll_scratch};
use rustile_ops::norm::{self, NormGrads, Saved};
use rustile_ops::testing::{assert_close, normal, rel_err, rng, tolerance, wide};
use rustile_ops::{reference, vector};
use rustile_tests::{gpu_or_skip, poisoned, up};

fn norm_backward_case<T: Elem>(gpu: &Gpu, rows: usize, cols: usize, rms: bool) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, 0.5, 2.0);
    let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
    let dy: Vec<T> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let dres: Vec<T> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let (tx, tw, tdy, tdres) = (up(gpu, &x, &[rows, cols]), up(gpu, &w, &[cols]), up(gpu, &dy, &[rows, cols]), up(gpu, &dres, &[rows, cols]));
    let (mut y, mut mean, mut rstd) = (poisoned::<T>(gpu, &[rows, cols]), poisoned::<f32>(gpu, &[rows]), poisoned::<f32>(gpu, &[rows]));
    if rms {
        norm::rms_norm(gpu, &tx, &tw, 1e-5, &mut y, &mut rstd).unwrap();
    } else {
        norm::layer_norm(gpu, &tx, &tw, None, 1e-5, &mut y, &mut mean, &mut rstd).unwrap();
    }
    let (want_dx, want_dw, want_db) = reference::norm_backward(&wide(&dy), &wide(&x), cols, &wide(&w), 1e-5, rms);
    let want_dx: Vec<f64> = want_dx.iter().zip(wide(&dres)).map(|(a, b)| a + b).collect();
    let mut scratch = norm::norm_backward_scratch(gpu, rows, cols).unwrap();
    let (mut dx, mut dw, mut db) = (poisoned::<T>(gpu, &[rows, cols]), poisoned::<f32>(gpu, &[cols]), poisoned::<f32>(gpu, &[cols]));
    let saved = if rms { Saved::RmsNorm { rstd: &rstd } } else { Saved::LayerNorm { mean: &mean, rstd: &rstd } };
    let grads = NormGrads { dx: &mut dx, dw: &mut dw, db: (!rms).then_some(&mut db) };
    norm::norm_backward(gpu, &tdy, &tx, &tw, saved, Some(&tdres), grads, &mut scratch).unwrap();
    let ctx = format!("norm_backward<{}> {rows}×{cols} rms={rms} (seed {seed})", T::NAME);
    let err = rel_err(&gpu.download(&dx).unwrap(), &want_dx);
    assert!(err <= 4.0 * tolerance::<T>(), "{ctx}: dx rel err {err:.2e}");
    let dw = gpu.download(&dw).unwrap();
    assert!(rel_err(&dw, &want_dw) < 1e-4, "{ctx}: dw rel err {:.2e}", rel_err(&dw, &want_dw));
    if !rms {
        assert!(rel_err(&gpu.download(&db).unwrap(), &want_db) < 1e-4, "{ctx}: db");
    }
    // A second run gives the same bits (no atomics in the reduction).
    let mut dw2 = poisoned::<f32>(gpu, &[cols]);
    let saved = if rms { Saved::RmsNorm { rstd: &rstd } } else { Saved::LayerNorm { mean: &mean, rstd: &rstd } };
    let grads = NormGrads { dx: &mut dx, dw: &mut dw2, db: None };
    norm::norm_backward(gpu, &tdy, &tx, &tw, saved, Some(&tdres), grads, &mut scratch).unwrap();
    assert!(gpu.download(&dw2).unwrap().iter().zip(&dw).all(|(a, b)| a.to_bits() == b.to_bits()), "{ctx}: not deterministic");
}

#[test]
fn norm_backward_matches_float64() {
    let Some(gpu) = gpu_or_skip("norm_backward_matches_float64") else { return };
    for (rows, cols) in [(1, 7), (37, 33), (36_097, 512), (9, 1000), (5, 4096), (3, 9001)] {
        for rms in [false, true] {
            norm_backward_case::<bf16>(&gpu, rows, cols, rms);
            norm_backward_case::<f32>(&gpu, rows, cols, rms);
        }
    }
}

#[test]
fn gmm_nll_matches_the_interpreter() {
    let Some(gpu) = gpu_or_skip("gmm_nll_matches_the_interpreter") else { return };
    let (mut rng, seed) = rng();
    for (rows, k, spread) in [(1, 1, 0.5), (3001, 10, 0.5), (32_001, 10, 15.0), (77, 16, 3.0)] {
        let vals: Vec<f32> = normal(&mut rng, rows * k * 3, 0.0, 1.5);
        let lss: Vec<f32> = normal(&mut rng, rows * k, 0.0, spread);
        let out: Vec<bf16> = (0..rows * k * 3).map(|i| bf16::from_f32(if i % 3 == 2 { lss[i / 3].clamp(-20.0, 20.0) } else { vals[i] })).collect();
        let y: Vec<f32> = normal(&mut rng, rows, 0.0, 1.5);
        let (tout, ty) = (up(&gpu, &out, &[rows, k, 3]), up(&gpu, &y, &[rows]));
        let (mut loss, mut scratch) = (poisoned::<f32>(&gpu, &[1]), gmm_nll_scratch(&gpu, rows).unwrap());
        gmm_nll(&gpu, &tout, &ty, &mut loss, &mut scratch).unwrap();
        let (got, want) = (gpu.download(&loss).unwrap()[0], gmm_nll_cpu(&out, &y, k, gpu.sm_count() as usize));
        let ctx = format!("gmm_nll rows={rows} k={k} log_sigma spread {spread} (seed {seed})");
        // The GPU's exp and log are approximations of a few ulp.
        assert!(got.is_finite() && (got - want).abs() <= 1e-4 * want.abs().max(1.0), "{ctx}: loss {got} vs {want}");
        let mut dout = poisoned::<bf16>(&gpu, &[rows, k, 3]);
        gmm_nll_backward(&gpu, &tout, &ty, 1.0, &mut dout).unwrap();
        let want = gmm_nll_backward_cpu(&out, &y, k, 1.0);
        let got = gpu.download(&dout).unwrap();
        assert!(got.iter().all(|g| g.to_f32().is_finite()), "{ctx}: a gradient is not finite");
        let err = rel_err(&got, &wide(&want));
        assert!(err <= 2.0 * tolerance::<bf16>(), "{ctx}: gradient rel err {err:.2e} against the interpreter");
    }
}

#[test]
fn adamw_matches_the_interpreter() {
    let Some(gpu) = gpu_or_skip("adamw_matches_the_interpreter") else { return };
    let (mut rng, seed) = rng();
    let (n, decay_end) = (100_003, 60_001);
    let opt = AdamW { lr: 1e-2, ..AdamW::default() };
    let mut p: Vec<f32> = normal(&mut rng, n, 0.0, 1.0);
    let (mut m, mut v, mut copy) = (vec![0.0; n], vec![0.0; n], vec![bf16::from_f32(0.0); n]);
    let (mut tp, mut tm, mut tv) = (up(&gpu, &p, &[n]), up(&gpu, &m, &[n]), up(&gpu, &v, &[n]));
    let mut tcopy = poisoned::<bf16>(&gpu, &[n]);
    let mut hyper = gpu.alloc::<f32>(&[HYPER_LEN]).unwrap();
    for t in 1..=3 {
        let g: Vec<f32> = normal(&mut rng, n, 0.0, 0.1);
        let tg = up(&gpu, &g, &[n]);
        gpu.write(&mut hyper, &opt.hyper(t)).unwrap();
        adamw_step(&gpu, &opt, AdamWState { params: &mut tp, grads: &tg, m: &mut tm, v: &mut tv, copy: &mut tcopy }, &hyper, decay_end).unwrap();
        adamw_step_cpu(&opt, t, &mut p, &g, &mut m, &mut v, &mut copy, decay_end);
        let ctx = format!("adamw step {t} (seed {seed})");
        assert!(rel_err(&gpu.download(&tp).unwrap(), &wide(&p)) < 1e-6, "{ctx}: params");
        assert!(rel_err(&gpu.download(&tv).unwrap(), &wide(&v)) < 1e-6, "{ctx}: second moment");
        assert!(rel_err(&gpu.download(&tcopy).unwrap(), &wide(&copy)) <= tolerance::<bf16>(), "{ctx}: bf16 copy");
    }
}

/// `C = (A·Bᵀ) ⊙ silu'(pre)` in every GEMM kernel, into bf16 and (on
/// `mma.sync`) f32.
#[test]
fn silu_grad_epilogue_matches_float64() {
    let Some(gpu) = gpu_or_skip("silu_grad_epilogue_matches_float64") else { return };
    let (m, n, k) = (333, 1365, 520);
    let (mut rng, seed) = rng();
    let a: Vec<bf16> = normal(&mut rng, m * k, 0.0, 1.0);
    let b: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
    let pre: Vec<bf16> = normal(&mut rng, m * n, 0.0, 3.0);
    let (ta, tb, tpre) = (up(&gpu, &a, &[m, k]), up(&gpu, &b, &[n, k]), up(&gpu, &pre, &[m, n]));
    let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    let e = Epi { act: Act::SiluGrad, residual: true, ..Epi::NONE };
    let want: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&e, ab[i], 0.0, pre[i].to_f32() as f64, 0.0)).collect();
    let epi = Epilogue::new().silu_grad(&tpre);
    if gemm::gemm_wgmma_kernel::supported(&gpu) {
        let configs = (0..gemm::gemm_wgmma_kernel::CONFIGS.len()).map(gemm::Config::Wgmma).chain((0..gemm::gemm_tma_kernel::CONFIGS.len()).map(gemm::Config::Tma));
        for cfg in configs {
            let mut c = poisoned::<bf16>(&gpu, &[m, n]);
            gemm::gemm_with_config(&gpu, cfg, &ta, tb.t(), &mut c, &epi).unwrap();
            assert_close(&gpu.download(&c).unwrap(), &want, &format!("silu_grad {cfg:?} (seed {seed})"));
        }
    } else {
        eprintln!("skipping the Hopper kernels' SiLU backward: {} is not sm_90a", gpu.name());
    }
    for cfg in 0..gemm::gemm_nt_kernel::CONFIGS.len() {
        let mut c32 = poisoned::<f32>(&gpu, &[m, n]);
        gemm::launch_plan_cast(&gpu, Some(gemm::Config::Mma(cfg)), &gemm::Plan::nt(m, n, k), &ta, &tb, &mut c32, &epi, gemm::Cast::default()).unwrap();
        assert_close(&gpu.download(&c32).unwrap(), &want, &format!("silu_grad into f32, mma config {cfg} (seed {seed})"));
        let mut c = poisoned::<bf16>(&gpu, &[m, n]);
        gemm::gemm_with_config(&gpu, gemm::Config::Mma(cfg), &ta, tb.t(), &mut c, &epi).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("silu_grad into bf16, mma config {cfg} (seed {seed})"));
    }
    // Without the pre-activation it is refused.
    let mut c = poisoned::<bf16>(&gpu, &[m, n]);
    let err = gemm::gemm(&gpu, &ta, tb.t(), &mut c, &Epilogue::new().act(Act::SiluGrad)).unwrap_err();
    assert!(err.to_string().contains("silu_grad"), "{err}");
}

#[test]
fn transpose_matches() {
    let Some(gpu) = gpu_or_skip("transpose_matches") else { return };
    let (mut rng, seed) = rng();
    for [batch, rows, cols] in [[1, 512, 1365], [10, 1368, 3], [3, 33, 65]] {
        let x: Vec<bf16> = normal(&mut rng, batch * rows * cols, 0.0, 1.0);
        let mut y = poisoned::<bf16>(&gpu, &[batch, cols, rows]);
        rustile_ops::transpose::transpose(&gpu, &up(&gpu, &x, &[batch, rows, cols]), &mut y).unwrap();
        let want = rustile_ops::testing::transpose(&x, batch, rows, cols);
        assert!(gpu.download(&y).unwrap() == want, "transpose {batch}×{rows}×{cols} (seed {seed})");
    }
}

#[test]
fn silu_matches_float64() {
    let Some(gpu) = gpu_or_skip("silu_matches_float64") else { return };
    let (mut rng, seed) = rng();
    let n = 1_000_003;
    let x: Vec<bf16> = normal(&mut rng, n, 0.0, 4.0);
    let mut out: Tensor<bf16> = poisoned(&gpu, &[n]);
    vector::silu(&gpu, &up(&gpu, &x, &[n]), &mut out).unwrap();
    let want: Vec<f64> = wide(&x).iter().map(|v| v / (1.0 + (-v).exp())).collect();
    assert_close(&gpu.download(&out).unwrap(), &want, &format!("silu (seed {seed})"));
}
