//! CPU-interpreter checks of the GEMM kernels against float64 for every
//! config: odd shapes (edges in M, N and K, K shorter than one BK step),
//! shapes whose rows are 16-byte aligned (so interior windows take the
//! unmasked copy path), and every fused epilogue.
use super::*;
use crate::reference;
use crate::testing::*;

/// Operands `a` `[m, k]`, `b` `[n, k]` and their float64 product.
fn operands<T: Elem>(m: usize, n: usize, k: usize) -> (Vec<T>, Vec<T>, Vec<f64>, u64) {
    let (mut rng, seed) = rng();
    let a: Vec<T> = normal(&mut rng, m * k, 0.0, 1.0);
    let b: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
    let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    (a, b, ab, seed)
}

fn check<T: Elem>(m: usize, n: usize, k: usize) {
    let (a, b, want, seed) = operands::<T>(m, n, k);
    let e = Epi::NONE;
    for cfg in 0..gemm_nt_kernel::CONFIGS.len() {
        let mut c = poisoned::<T>(m * n);
        launch_plan_cpu(cfg, &Plan::nt(m, n, k), &a, &b, &mut c, &[], &[], e);
        assert_close(&c, &want, &format!("gemm_nt<{}> {m}×{n}×{k} cfg={cfg} (seed {seed})", T::NAME));
    }
}

#[test]
fn gemm_nt_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 1), (17, 9, 5), (70, 33, 48), (129, 131, 77), (3, 260, 100), (200, 300, 136)] {
        check::<bf16>(m, n, k);
        check::<f16>(m, n, k);
    }
}

/// The `wgmma` kernels' programs (copies by `cp.async` and by TMA, as the
/// interpreter runs them) at the same odd shapes, every config, with and
/// without a fused epilogue.
#[test]
fn gemm_wgmma_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 1), (17, 9, 5), (129, 131, 77), (200, 300, 136)] {
        let (a, b, want, seed) = operands::<bf16>(m, n, k);
        let wgmma = (0..gemm_wgmma_kernel::CONFIGS.len()).map(Config::Wgmma);
        for cfg in wgmma.chain((0..gemm_tma_kernel::CONFIGS.len()).map(Config::Tma)) {
            let mut c = poisoned::<bf16>(m * n);
            launch_plan_cpu(cfg, &Plan::nt(m, n, k), &a, &b, &mut c, &[], &[], Epi::NONE);
            assert_close(&c, &want, &format!("gemm {m}×{n}×{k} {cfg:?} (seed {seed})"));
        }
    }
    let (m, n, k) = (70, 45, 37);
    let (a, b, ab, seed) = operands::<f16>(m, n, k);
    let bias: Vec<f16> = normal(&mut rng().0, n, 0.0, 3.0);
    let e = Epi { alpha: 0.5, beta: 0.0, bias: Bias::PerColumn, act: Act::Silu, residual: false };
    let want: Vec<f64> = (0..m * n).map(|at| reference::epilogue(&e, ab[at], bias[at % n].to_f32() as f64, 0.0, 0.0)).collect();
    let mut c = poisoned::<f16>(m * n);
    launch_plan_cpu(Config::Wgmma(3), &Plan::nt(m, n, k), &a, &b, &mut c, &bias, &[], e);
    assert_close(&c, &want, &format!("gemm_wgmma {e:?} (seed {seed})"));
}

#[test]
fn host_wrapper_runs_the_default_config() {
    let (m, n, k) = (33, 20, 40);
    let (a, b, want, seed) = operands::<bf16>(m, n, k);
    assert_close(&gemm_nt_cpu(&a, &b, m, n, k), &want, &format!("gemm_nt_cpu (seed {seed})"));
}

#[test]
fn every_fused_epilogue_matches_float64() {
    let (m, n, k) = (70, 45, 37);
    let (a, b, ab, seed) = operands::<bf16>(m, n, k);
    let (mut rng, _) = rng();
    let bias_n: Vec<bf16> = normal(&mut rng, n, 0.0, 3.0);
    let bias_m: Vec<bf16> = normal(&mut rng, m, 0.0, 3.0);
    let residual: Vec<bf16> = normal(&mut rng, m * n, 0.0, 2.0);
    let old: Vec<bf16> = normal(&mut rng, m * n, 0.0, 2.0);
    let acts = [Act::None, Act::Relu, Act::Relu2, Act::Silu, Act::GeluTanh, Act::SiluGrad];
    for (i, act) in acts.into_iter().enumerate() {
        for bias in [Bias::None, Bias::PerColumn, Bias::PerRow] {
            let e = Epi { alpha: 0.25 + i as f32 * 0.5, beta: if i % 2 == 0 { 0.0 } else { -0.5 }, bias, act, residual: i % 3 != 1 };
            let bias_data = match bias {
                Bias::PerRow => &bias_m,
                _ => &bias_n,
            };
            let want: Vec<f64> = (0..m * n)
                .map(|at| {
                    let (r, c) = (at / n, at % n);
                    let bv = match bias {
                        Bias::None => 0.0,
                        Bias::PerColumn => bias_n[c].to_f32() as f64,
                        Bias::PerRow => bias_m[r].to_f32() as f64,
                    };
                    let rv = if e.residual { residual[at].to_f32() as f64 } else { 0.0 };
                    reference::epilogue(&e, ab[at], bv, rv, old[at].to_f32() as f64)
                })
                .collect();
            for cfg in [Config::Mma(MMA_64), Config::Mma(MMA_128), Config::Wgmma(3), Config::Tma(0)] {
                let mut c = old.clone();
                launch_plan_cpu(cfg, &Plan::nt(m, n, k), &a, &b, &mut c, bias_data, &residual, e);
                assert_close(&c, &want, &format!("gemm {e:?} {cfg:?} (seed {seed})"));
            }
        }
    }
}

#[test]
fn epilogue_flags_round_trip() {
    for act in [Act::None, Act::Relu, Act::Relu2, Act::Silu, Act::GeluTanh, Act::SiluGrad] {
        for bias in [Bias::None, Bias::PerColumn, Bias::PerRow] {
            for residual in [false, true] {
                let e = Epi { alpha: 2.0, beta: 0.5, bias, act, residual };
                assert_eq!(Epi::from_flags(e.flags(), 2.0, 0.5), e);
            }
        }
    }
}

#[test]
fn softcap_matches_float64() {
    let (m, n, k) = (77, 130, 64);
    let (a, b, ab, seed) = operands::<bf16>(m, n, k);
    let cap = 5.0;
    let want: Vec<f64> = ab.iter().map(|x| cap * (x / cap).tanh()).collect();
    for cfg in 0..gemm_softcap_kernel::CONFIGS.len() {
        let mut c = poisoned::<bf16>(m * n);
        gemm_softcap_kernel::cpu(cfg, &a, &b, &mut c, m, n, k, cap as f32);
        assert_close(&c, &want, &format!("gemm_softcap cfg={cfg} (seed {seed})"));
    }
}

/// Every operand layout, batched, with a shared (2-D) operand and a fused
/// epilogue: each `gemm_*_kernel` in the interpreter against float64.
#[test]
fn every_layout_and_batch_matches_float64() {
    let (m, n, k, batch) = (37, 45, 70, 3);
    let (mut rng, seed) = rng();
    // Logical A [batch, m, k] and B [n, k] per batch (B shared when `shared`).
    let a: Vec<bf16> = normal(&mut rng, batch * m * k, 0.0, 1.0);
    let b: Vec<bf16> = normal(&mut rng, batch * n * k, 0.0, 1.0);
    let bias: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
    let e = Epi { bias: Bias::PerColumn, act: Act::Silu, ..Epi::NONE };
    for shared in [false, true] {
        let b_batch = if shared { 1 } else { batch };
        let want: Vec<f64> = (0..batch)
            .flat_map(|z| {
                let bz = if shared { 0 } else { z };
                let ab = reference::matmul_nt(&wide(&a[z * m * k..][..m * k]), &wide(&b[bz * n * k..][..n * k]), m, n, k);
                ab.into_iter().enumerate().map(|(i, x)| reference::epilogue(&e, x, bias[i % n].to_f32() as f64, 0.0, 0.0)).collect::<Vec<_>>()
            })
            .collect();
        for (ta, tb) in [(false, true), (false, false), (true, false), (true, true)] {
            // Stored forms: A [k, m] when ta, B [n, k] when tb (else [k, n]).
            let sa = if ta { transpose(&a, batch, m, k) } else { a.clone() };
            let b = &b[..b_batch * n * k];
            let sb = if tb { b.to_vec() } else { transpose(b, b_batch, n, k) };
            let a_shape = if ta { [batch, k, m] } else { [batch, m, k] };
            let b_shape: &[usize] = match (shared, tb) {
                (true, true) => &[n, k],
                (true, false) => &[k, n],
                (false, true) => &[batch, n, k],
                (false, false) => &[batch, k, n],
            };
            let p = plan_shapes((&a_shape, ta), (b_shape, tb), &[batch, m, n]).unwrap();
            assert_eq!((p.ta, p.tb, p.batch, p.m, p.n, p.k), (ta, tb, batch, m, n, k));
            let hopper = if !ta && tb { vec![Config::Wgmma(0), Config::Tma(1)] } else { vec![] };
            for cfg in [Config::Mma(MMA_64), Config::Mma(MMA_128)].into_iter().chain(hopper) {
                let mut c = poisoned::<bf16>(batch * m * n);
                launch_plan_cpu(cfg, &p, &sa, &sb, &mut c, &bias, &[], e);
                assert_close(&c, &want, &format!("gemm ta={ta} tb={tb} shared b={shared} {cfg:?} (seed {seed})"));
            }
        }
    }
}

#[test]
fn plans_name_what_does_not_fit() {
    let err = |a: (&[usize], bool), b: (&[usize], bool), c: &[usize]| plan_shapes(a, b, c).unwrap_err().to_string();
    assert!(err((&[4, 5], false), (&[6, 7], false), &[4, 7]).contains("inner dimensions"));
    assert!(err((&[4, 5], false), (&[7, 5], false), &[4, 7]).contains("inner dimensions"), "b [n, k] needs .t()");
    assert!(err((&[2, 4, 5], false), (&[5, 7], false), &[3, 4, 7]).contains("c's batch of 3"));
    assert!(err((&[4, 5], false), (&[5, 7], false), &[2, 2, 4, 7]).contains("[batch, m, n]"));
    // A [k, m] used transposed, B [n, k] used transposed, batched C with shared operands.
    let p = plan_shapes((&[5, 4], true), (&[7, 5], true), &[2, 4, 7]).unwrap();
    assert_eq!((p.m, p.n, p.k, p.batch, p.ld, p.stride), (4, 7, 5, 2, [4, 5, 7], [0, 0, 28, 0]));
}

#[test]
fn plans_that_reach_past_a_tensor_are_refused() {
    let p = Plan { m: 4, n: 3, k: 5, batch: 2, ld: [5, 5, 6], stride: [0, 15, 3, 3], ta: false, tb: true };
    let e = Epi { bias: Bias::PerColumn, ..Epi::NONE };
    // c: (2 − 1)·3 + (4 − 1)·6 + 3 = 24 elements; bias (2 − 1)·3 + 3 = 6.
    assert!(p.check(e, [20, 30, 24, 6, 0]).is_ok());
    assert!(p.check(e, [20, 30, 23, 6, 0]).unwrap_err().to_string().contains("c as 2 matrices"));
    assert!(p.check(e, [20, 30, 24, 5, 0]).unwrap_err().to_string().contains("bias"));
    assert!(p.check(e, [19, 30, 24, 6, 0]).unwrap_err().to_string().contains("a as 2"));
    let narrow = Plan { ld: [4, 5, 6], ..p };
    assert!(narrow.check(e, [100, 100, 100, 100, 0]).is_err(), "a row stride below the row length overlaps rows");
}

/// Outputs of other types, from every kernel, config and operand layout
/// (interpreter): f32 with the whole epilogue, β included, and an output
/// scale; e4m3 at a scale that saturates the largest values; both with the
/// amax of the values before the scale, which an edge block's rows past `m`
/// (bias only) must not reach.
#[test]
fn cast_outputs_match_float64() {
    let (m, n, k) = (131, 45, 72);
    let (a, b, ab, seed) = operands::<bf16>(m, n, k);
    let (mut rng, _) = rng();
    // The last column's bias (200) is nearly cancelled by its residual
    // (-300) inside C, but not past row m, where there is no residual: an
    // amax that counted those rows would be 200 instead of about 100.
    let mut bias: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
    bias[n - 1] = bf16::from_f32(200.0);
    let mut residual: Vec<bf16> = normal(&mut rng, m * n, 0.0, 1.0);
    for r in 0..m {
        residual[r * n + n - 1] = bf16::from_f32(-300.0);
    }
    let old: Vec<f32> = normal(&mut rng, m * n, 0.0, 1.0);
    let e = Epi { alpha: 0.5, beta: 0.25, bias: Bias::PerColumn, act: Act::GeluTanh, residual: true };
    let y = |e: &Epi, i: usize| reference::epilogue(e, ab[i], bias[i % n].to_f32() as f64, residual[i].to_f32() as f64, old[i] as f64);
    let (y32, y8): (Vec<f64>, Vec<f64>) = (0..m * n).map(|i| (y(&e, i), y(&Epi { beta: 0.0, ..e }, i))).unzip();
    let s8 = (600.0 / y8.iter().fold(0.0f64, |t, v| t.max(v.abs()))) as f32;
    for (ta, tb, cfg) in every_kernel_and_layout() {
        // Stored forms: A [k, m] when ta, B [n, k] when tb (else [k, n]).
        let sa = if ta { transpose(&a, 1, m, k) } else { a.clone() };
        let sb = if tb { b.clone() } else { transpose(&b, 1, n, k) };
        let plan = plan_shapes((&if ta { [k, m] } else { [m, k] }, ta), (&if tb { [n, k] } else { [k, n] }, tb), &[m, n]).unwrap();
        let (a, b) = (&sa, &sb);
        let ctx = format!("gemm ta={ta} tb={tb} {m}×{n}×{k} {cfg:?} (seed {seed})");
        let (mut c, mut amax) = (old.clone(), vec![0.0f32]);
        launch_plan_cast_cpu(cfg, &plan, [a, b, &bias, &residual], &mut c, e, &[2.0], &mut amax);
        assert_close(&c, &y32.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), &format!("{ctx} → f32"));
        let (top, ok) = amax_matches(amax[0], &y32, 1e-5);
        assert!(ok, "{ctx} → f32: amax {} instead of {top}", amax[0]);

        let (mut c8, mut amax) = (poisoned::<F8E4M3>(m * n), vec![0.0f32]);
        launch_plan_cast_cpu(cfg, &plan, [a, b, &bias, &residual], &mut c8, Epi { beta: 0.0, ..e }, &[s8], &mut amax);
        assert_e4m3_close(&c8, &y8.iter().map(|v| s8 as f64 * v).collect::<Vec<_>>(), &format!("{ctx} → e4m3"));
        assert!(c8.iter().any(|v| v.to_f32().abs() == 448.0), "{ctx} → e4m3: nothing saturated at scale {s8}");
        let (top, ok) = amax_matches(amax[0], &y8, 1e-5);
        assert!(ok, "{ctx} → e4m3: amax {} instead of {top}", amax[0]);
    }
}

/// Without a scale or an amax the cast path is the plain store (the
/// compact epilogue loop), and f16 operands write f32 too.
#[test]
fn plain_f32_outputs_match_float64() {
    let (m, n, k) = (70, 33, 48);
    let (a, b, ab, seed) = operands::<f16>(m, n, k);
    for (_, _, cfg) in every_kernel_and_layout().filter(|&(ta, tb, _)| !ta && tb) {
        let mut c = poisoned::<f32>(m * n);
        launch_plan_cast_cpu(cfg, &Plan::nt(m, n, k), [&a, &b, &[], &[]], &mut c, Epi::NONE, &[], &mut []);
        assert_close(&c, &ab, &format!("gemm<f16 → f32> {cfg:?} (seed {seed})"));
    }
}

/// `(ta, tb, config)` for every config of every GEMM kernel, each with
/// every layout it takes (the `wgmma` kernels take A `[m, k]`, B `[n, k]`).
fn every_kernel_and_layout() -> impl Iterator<Item = (bool, bool, Config)> {
    let layouts = [(false, true), (false, false), (true, false), (true, true)];
    let mma = layouts.into_iter().flat_map(|(ta, tb)| (0..gemm_nt_kernel::CONFIGS.len()).map(move |c| (ta, tb, Config::Mma(c))));
    let wgmma = (0..gemm_wgmma_kernel::CONFIGS.len()).map(|c| (false, true, Config::Wgmma(c)));
    mma.chain(wgmma).chain((0..gemm_tma_kernel::CONFIGS.len()).map(|c| (false, true, Config::Tma(c))))
}

/// `k = 0`: no k-steps, so C is the epilogue of zeros (`act(bias) +
/// residual + β·c`), batched, from every kernel and config in each layout it
/// takes (the `mma.sync` kernels in all four, the Hopper ones in `a·bᵀ`).
#[test]
fn an_empty_k_is_the_epilogue_of_zero() {
    let (m, n, batch) = (37, 45, 2);
    let (mut rng, seed) = rng();
    let bias: Vec<bf16> = normal(&mut rng, m, 0.0, 3.0);
    let residual: Vec<bf16> = normal(&mut rng, batch * m * n, 0.0, 2.0);
    let old: Vec<bf16> = normal(&mut rng, batch * m * n, 0.0, 2.0);
    let e = Epi { alpha: 0.5, beta: -0.5, bias: Bias::PerRow, act: Act::GeluTanh, residual: true };
    let want: Vec<f64> = (0..batch * m * n)
        .map(|i| reference::epilogue(&e, 0.0, bias[i / n % m].to_f32() as f64, residual[i].to_f32() as f64, old[i].to_f32() as f64))
        .collect();
    let mut cases: Vec<(bool, bool, Config)> = Vec::new();
    for (ta, tb) in [(false, true), (false, false), (true, false), (true, true)] {
        cases.extend((0..gemm_nt_kernel::CONFIGS.len()).map(|c| (ta, tb, Config::Mma(c))));
    }
    cases.extend((0..gemm_wgmma_kernel::CONFIGS.len()).map(|c| (false, true, Config::Wgmma(c))));
    cases.extend((0..gemm_tma_kernel::CONFIGS.len()).map(|c| (false, true, Config::Tma(c))));
    for (ta, tb, cfg) in cases {
        // A stored [0, m] or [m, 0], B [n, 0] or [0, n]: their row strides as `gemm` plans them.
        let plan = Plan { m, n, k: 0, batch, ld: [if ta { m } else { 0 }, if tb { 0 } else { n }, n], stride: [0, 0, m * n, 0], ta, tb };
        let mut c = old.clone();
        launch_plan_cpu(cfg, &plan, &[], &[], &mut c, &bias, &residual, e);
        assert_close(&c, &want, &format!("gemm ta={ta} tb={tb} {batch}×{m}×{n}×0 {cfg:?} (seed {seed})"));
    }
}

/// The SiLU backward through `mma.sync` into the operands' type and into f32.
#[test]
fn silu_grad_through_mma_sync_matches_float64() {
    let (m, n, k) = (20, 24, 16);
    let (a, b, ab, seed) = operands::<bf16>(m, n, k);
    let pre: Vec<bf16> = normal(&mut rng().0, m * n, 0.0, 2.0);
    let e = Epi { act: Act::SiluGrad, residual: true, ..Epi::NONE };
    let want: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&e, ab[i], 0.0, pre[i].to_f32() as f64, 0.0)).collect();
    let mut c = vec![bf16::from_f32(0.0); m * n];
    launch_plan_cpu(Config::Mma(MMA_64), &Plan::nt(m, n, k), &a, &b, &mut c, &[], &pre, e);
    assert_close(&c, &want, &format!("silu_grad into bf16 through mma.sync (seed {seed})"));
    let mut c = vec![0.0f32; m * n];
    launch_plan_cast_cpu(Config::Mma(MMA_64), &Plan::nt(m, n, k), [&a, &b, &[], &pre], &mut c, e, &[], &mut []);
    assert_close(&c, &want, &format!("silu_grad into f32 through mma.sync (seed {seed})"));
}

/// A weight gradient `dw = dyᵀ·x` cut along k (with a remainder part)
/// matches float64, through the host API on the interpreter.
#[test]
fn split_k_matches_float64() {
    let gpu = rustile_host::Gpu::interpreter();
    let (m, n, k) = (40, 72, 2003);
    let (mut rng, seed) = rng();
    let dy: Vec<bf16> = normal(&mut rng, k * m, 0.0, 1.0);
    let x: Vec<bf16> = normal(&mut rng, k * n, 0.0, 1.0);
    let (tdy, tx) = (gpu.upload(&dy, &[k, m]).unwrap(), gpu.upload(&x, &[k, n]).unwrap());
    let parts = split_k_parts(&gpu, m, n, k);
    assert!(parts > 1 && k % parts != 0, "the test wants several parts and a remainder; {parts} parts");
    let mut scratch = split_k_scratch(&gpu, m, n, k).unwrap();
    let mut dw = gpu.alloc::<f32>(&[m, n]).unwrap();
    gemm_split_k(&gpu, tdy.t(), &tx, &mut dw, &mut scratch).unwrap();
    let (a, b) = (crate::testing::transpose(&wide(&dy), 1, k, m), crate::testing::transpose(&wide(&x), 1, k, n));
    let want = reference::matmul_nt(&a, &b, m, n, k);
    assert_close(&gpu.download(&dw).unwrap(), &want, &format!("split-k dyᵀ·x in {parts} parts (seed {seed})"));
}

/// Where a part count near the target divides k, no rows are left over.
#[test]
fn split_k_parts_divide_k_where_they_can() {
    let gpu = rustile_host::Gpu::interpreter();
    for k in [1 << 16, 36096, 5000] {
        let parts = split_k_parts(&gpu, 40, 72, k);
        assert!(parts > 1 && k % parts == 0, "k = {k}: {parts} parts leave {} rows over", k % parts);
    }
}

#[test]
fn named_mma_configs_have_their_block_shapes() {
    let shape = |configs: &[rustile::KernelConfig], i: usize| [configs[i].get("BM").unwrap(), configs[i].get("BN").unwrap(), configs[i].get("BK").unwrap()];
    for configs in [gemm_nt_kernel::CONFIGS, gemm_tn_kernel::CONFIGS, gemm_softcap_kernel::CONFIGS, crate::grouped_gemm::grouped_gemm_kernel::CONFIGS] {
        assert_eq!(shape(configs, MMA_64), [64, 64, 32]);
        assert_eq!(shape(configs, MMA_128), [128, 128, 64]);
    }
}
