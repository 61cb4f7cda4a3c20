//! Every op on the GPU, against float64 references, on fresh random inputs
//! at odd sizes, with outputs poisoned (all bits set, a NaN) beforehand so
//! an unwritten element fails. Every config of every kernel runs at least once.
use rustile::{bf16, f16, Elem};
use rustile_host::{Error, Gpu, Tensor};
use rustile_ops::testing::{assert_attention_close, assert_close, mean_err, normal, rel_err, rng, tolerance, wide};
use rustile_ops::{attention, dual_gemm, dual_gemm_nvfp4, gemm, gemm_fp8, mlp, norm, reference, softmax, testing, vector};
use rustile_tests::{gpu_or_skip, hopper_or_skip, poisoned, up};

fn vector_case<T: Elem>(gpu: &Gpu, n: usize) {
    let (mut rng, seed) = rng();
    let (x, y): (Vec<T>, Vec<T>) = (normal(&mut rng, n, 0.0, 1.0), normal(&mut rng, n, 0.0, 1.0));
    let (dx, dy) = (up(gpu, &x, &[n]), up(gpu, &y, &[n]));
    for cfg in 0..vector::add_kernel::CONFIGS.len() {
        let mut out = poisoned::<T>(gpu, &[n]);
        vector::add_kernel::launch(gpu, cfg, &dx, &dy, &mut out, n).unwrap();
        let err = rel_err(&gpu.download(&out).unwrap(), &reference::add(&wide(&x), &wide(&y)));
        assert!(err <= tolerance::<T>(), "add<{}> n={n} cfg={cfg}: rel err {err:.2e} (seed {seed})", T::NAME);

        let mut out = poisoned::<T>(gpu, &[n]);
        vector::swiglu_kernel::launch(gpu, cfg, &dx, &dy, &mut out, n).unwrap();
        let err = rel_err(&gpu.download(&out).unwrap(), &reference::swiglu(&wide(&x), &wide(&y)));
        assert!(err <= tolerance::<T>(), "swiglu<{}> n={n} cfg={cfg}: rel err {err:.2e} (seed {seed})", T::NAME);
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn vector_ops_match_float64() {
    let Some(gpu) = gpu_or_skip("vector_ops_match_float64") else { return };
    for n in [1, 7, 4097, 1_000_003] {
        vector_case::<f32>(&gpu, n);
        vector_case::<bf16>(&gpu, n);
        vector_case::<f16>(&gpu, n);
    }
}

/// `Gpu::concurrently`'s second stream waits for what was queued before it,
/// and what is queued after waits for it: each step reads the one before,
/// and the outputs start as NaN, so a missed wait shows as a wrong sum.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn concurrent_work_is_ordered_at_both_ends() {
    let Some(gpu) = gpu_or_skip("concurrent_work_is_ordered_at_both_ends") else { return };
    let n = 1 << 24; // long enough for a missed wait to lose the race
    let (mut rng, seed) = rng();
    let (x, y): (Vec<f32>, Vec<f32>) = (normal(&mut rng, n, 0.0, 1.0), normal(&mut rng, n, 0.0, 1.0));
    let (dx, dy) = (up(&gpu, &x, &[n]), up(&gpu, &y, &[n]));
    let [mut s, mut t1, mut t2, mut u] = [0; 4].map(|_| poisoned::<f32>(&gpu, &[n]));
    for _ in 0..3 {
        vector::add_kernel::launch(&gpu, 0, &dx, &dy, &mut s, n).unwrap(); // s = x + y
        gpu.concurrently(
            || vector::add_kernel::launch(&gpu, 0, &s, &dx, &mut t1, n),
            || {
                // A temporary of the second stream, freed there after its use.
                let mut twice = poisoned::<f32>(&gpu, &[n]);
                vector::add_kernel::launch(&gpu, 0, &s, &s, &mut twice, n)?;
                vector::add_kernel::launch(&gpu, 0, &twice, &dy, &mut t2, n)
            },
        )
        .unwrap();
        vector::add_kernel::launch(&gpu, 0, &t1, &t2, &mut u, n).unwrap(); // (2x + y) + (2x + 3y)
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| 4.0 * *a as f64 + 4.0 * *b as f64).collect();
        let err = rel_err(&gpu.download(&u).unwrap(), &want);
        assert!(err <= tolerance::<f32>(), "concurrently: rel err {err:.2e} (seed {seed})");
        for t in [&mut s, &mut t1, &mut t2, &mut u] {
            gpu.fill_bytes(t, 0xFF).unwrap();
        }
    }
}

fn softmax_case<T: Elem>(gpu: &Gpu, rows: usize, cols: usize, scale: f32) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, 0.0, scale);
    let want = reference::softmax(&wide(&x), cols);
    let dx = up(gpu, &x, &[rows, cols]);
    for cfg in 0..softmax::softmax_kernel::CONFIGS.len() {
        let mut y = poisoned::<T>(gpu, &[rows, cols]);
        softmax::softmax_kernel::launch(gpu, cfg, &dx, &mut y, rows, cols).unwrap();
        let err = rel_err(&gpu.download(&y).unwrap(), &want);
        assert!(err <= tolerance::<T>(), "softmax<{}> {rows}×{cols} ×{scale} cfg={cfg}: rel err {err:.2e} (seed {seed})", T::NAME);
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn softmax_matches_float64() {
    let Some(gpu) = gpu_or_skip("softmax_matches_float64") else { return };
    for (rows, cols) in [(1, 1), (1, 7), (37, 33), (5, 1000), (3, 3001), (2, 40_001), (1000, 129)] {
        softmax_case::<f32>(&gpu, rows, cols, 1.0);
        softmax_case::<bf16>(&gpu, rows, cols, 1.0);
        softmax_case::<f16>(&gpu, rows, cols, 1.0);
    }
    softmax_case::<f32>(&gpu, 7, 513, 1000.0);
    softmax_case::<f32>(&gpu, 7, 513, 1e-4);
}

fn norm_case<T: Elem>(gpu: &Gpu, rows: usize, cols: usize, offset: f32, bias: bool) {
    let (mut rng, seed) = rng();
    let x: Vec<T> = normal(&mut rng, rows * cols, offset, 1.0);
    let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
    let b: Vec<T> = normal(&mut rng, cols, 0.0, 0.5);
    let (dx, dw, db) = (up(gpu, &x, &[rows, cols]), up(gpu, &w, &[cols]), up(gpu, &b, &[cols]));
    let tol = tolerance::<T>() + 4.0 * offset.abs() as f64 * f32::EPSILON as f64;
    let (want, want_mean, want_rstd) = reference::layer_norm(&wide(&x), cols, &wide(&w), bias.then(|| wide(&b)).as_deref(), 1e-5);
    let (want_rms, want_rms_rstd) = reference::rms_norm(&wide(&x), cols, &wide(&w), 1e-6);
    for cfg in 0..norm::layer_norm_kernel::CONFIGS.len() {
        let ctx = format!("<{}> {rows}×{cols} offset={offset} bias={bias} cfg={cfg} (seed {seed})", T::NAME);
        let mut y = poisoned::<T>(gpu, &[rows, cols]);
        let (mut mean, mut rstd) = (poisoned::<f32>(gpu, &[rows]), poisoned::<f32>(gpu, &[rows]));
        norm::layer_norm_kernel::launch(gpu, cfg, &dx, &dw, &db, &mut y, &mut mean, &mut rstd, rows, cols, 1e-5, bias as u32).unwrap();
        let err = rel_err(&gpu.download(&y).unwrap(), &want);
        assert!(err <= tol, "layer_norm{ctx}: y rel err {err:.2e}");
        assert!(mean_err(&gpu.download(&mean).unwrap(), &want_mean, &want_rstd) < 1e-5, "layer_norm{ctx}: mean");
        assert!(rel_err(&gpu.download(&rstd).unwrap(), &want_rstd) < 1e-4, "layer_norm{ctx}: rstd");

        if offset == 0.0 {
            let mut y = poisoned::<T>(gpu, &[rows, cols]);
            let mut rstd = poisoned::<f32>(gpu, &[rows]);
            norm::rms_norm_kernel::launch(gpu, cfg, &dx, &dw, &mut y, &mut rstd, rows, cols, 1e-6).unwrap();
            let err = rel_err(&gpu.download(&y).unwrap(), &want_rms);
            assert!(err <= tol, "rms_norm{ctx}: y rel err {err:.2e}");
            assert!(rel_err(&gpu.download(&rstd).unwrap(), &want_rms_rstd) < 1e-4, "rms_norm{ctx}: rstd");
        }
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn norms_match_float64() {
    let Some(gpu) = gpu_or_skip("norms_match_float64") else { return };
    for (rows, cols) in [(1, 7), (37, 33), (5, 1000), (3, 3001), (2, 40_001), (1000, 129), (7, 128), (3, 1024), (5, 8192)] {
        for bias in [false, true] {
            norm_case::<f32>(&gpu, rows, cols, 0.0, bias);
            norm_case::<bf16>(&gpu, rows, cols, 0.0, bias);
        }
        norm_case::<f16>(&gpu, rows, cols, 0.0, true);
    }
    norm_case::<f32>(&gpu, 4, 5000, 1000.0, true);
}

/// Whether `run` was the TMA kernel refusing rows of `k` elements (not a
/// multiple of 8, so not 16-byte strides), as it must; any other outcome
/// of a TMA launch at such a `k` fails the test.
fn refused_by_tma(cfg: gemm::Config, k: usize, run: &Result<(), Error>) -> bool {
    if !matches!(cfg, gemm::Config::Tma(_)) || k % 8 == 0 {
        return false;
    }
    assert!(matches!(run, Err(Error::Shape(_))), "{cfg:?} at k = {k} should be refused with a shape error; got {run:?}");
    true
}

/// Every config of every GEMM kernel that takes A `[m, k]`, B `[n, k]`
/// on this GPU (the wgmma kernel's only on sm_90a, said when skipped).
fn nt_configs(gpu: &Gpu) -> Vec<gemm::Config> {
    let mut configs: Vec<gemm::Config> = (0..gemm::gemm_nt_kernel::CONFIGS.len()).map(gemm::Config::Mma).collect();
    if gemm::gemm_wgmma_kernel::supported(gpu) {
        configs.extend((0..gemm::gemm_wgmma_kernel::CONFIGS.len()).map(gemm::Config::Wgmma));
        configs.extend((0..gemm::gemm_tma_kernel::CONFIGS.len()).map(gemm::Config::Tma));
    } else {
        eprintln!("skipping the wgmma GEMM kernel: {} is not sm_90a", gpu.name());
    }
    configs
}

fn gemm_case<T: Elem>(gpu: &Gpu, m: usize, n: usize, k: usize) {
    let (mut rng, seed) = rng();
    let a: Vec<T> = normal(&mut rng, m * k, 0.0, 1.0);
    let b: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
    let (da, db) = (up(gpu, &a, &[m, k]), up(gpu, &b, &[n, k]));
    let want = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    for cfg in nt_configs(gpu) {
        let mut c = poisoned::<T>(gpu, &[m, n]);
        let run = gemm::gemm_nt_with_config(gpu, cfg, &da, &db, &mut c, &gemm::Epilogue::new());
        if refused_by_tma(cfg, k, &run) {
            continue;
        }
        run.unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_nt<{}> {m}×{n}×{k} {cfg:?} (seed {seed})", T::NAME));
    }
}

/// The GPU keeps at most `MAPS_KEPT` tensor maps: after more distinct
/// ones than that, the cache is full, not larger, and the TMA GEMMs whose
/// maps were dropped make them again and stay right.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn tensor_maps_are_bounded() {
    let Some(gpu) = hopper_or_skip("tensor_maps_are_bounded") else { return };
    gemm_case::<bf16>(&gpu, 300, 517, 264);
    let kept = rustile_host::MAPS_KEPT.get();
    // Maps are only encoded, never read, so any 16-byte-aligned base will do.
    for i in 0..kept as u64 + 64 {
        let map = rustile_host::TileMap { base: 0x1000_0000 + 256 * i, dims: [64, 64, 1], strides: [128, 8192], boxes: [64, 64, 1], elem_bytes: 2 };
        gpu.tensor_map(&map).unwrap();
    }
    assert_eq!(gpu.tensor_maps_kept(), kept, "the cache should be full, and no larger");
    gemm_case::<bf16>(&gpu, 300, 517, 264);
}

/// Every operand layout (`a·b`, `a·bᵀ`, `aᵀ·b`, `aᵀ·bᵀ`) through `gemm`,
/// batched with a per-matrix or a shared B, with a fused bias + GELU, at
/// every config, against float64.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_layouts_and_batches_match_float64() {
    use gemm::Transpose;
    let Some(gpu) = gpu_or_skip("gemm_layouts_and_batches_match_float64") else { return };
    for (m, n, k, batch) in [(37, 45, 70, 3), (300, 517, 264, 2), (1, 1030, 520, 1)] {
        let (mut rng, seed) = rng();
        // Logical A [batch, m, k] and B [batch, n, k] (the first one when shared).
        let a: Vec<bf16> = normal(&mut rng, batch * m * k, 0.0, 1.0);
        let b: Vec<bf16> = normal(&mut rng, batch * n * k, 0.0, 1.0);
        let bias: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
        let dbias = up(&gpu, &bias, &[n]);
        let epi = gemm::Epilogue::new().bias_per_column(&dbias).act(gemm::Act::GeluTanh);
        let (e, bias) = (epi.epi(), wide(&bias));
        for shared in [false, true] {
            let want: Vec<f64> = (0..batch)
                .flat_map(|z| {
                    let bz = if shared { 0 } else { z };
                    let ab = reference::matmul_nt(&wide(&a[z * m * k..][..m * k]), &wide(&b[bz * n * k..][..n * k]), m, n, k);
                    ab.into_iter().enumerate().map(|(i, x)| reference::epilogue(&e, x, bias[i % n], 0.0, 0.0)).collect::<Vec<_>>()
                })
                .collect();
            let nb = if shared { 1 } else { batch };
            let lead = |rows: usize, cols: usize| if shared { vec![rows, cols] } else { vec![batch, rows, cols] };
            let (a_mk, a_km) = (up(&gpu, &a, &[batch, m, k]), up(&gpu, &testing::transpose(&a, batch, m, k), &[batch, k, m]));
            let b = &b[..nb * n * k];
            let (b_nk, b_kn) = (up(&gpu, b, &lead(n, k)), up(&gpu, &testing::transpose(b, nb, n, k), &lead(k, n)));
            for cfg in nt_configs(&gpu) {
                for (ta, tb) in [(false, true), (false, false), (true, false), (true, true)] {
                    if !matches!(cfg, gemm::Config::Mma(_)) && (ta, tb) != (false, true) {
                        continue; // the wgmma kernels take A [m, k] and B [n, k] only
                    }
                    let mut c = poisoned::<bf16>(&gpu, &[batch, m, n]);
                    let a = if ta { a_km.t() } else { (&a_mk).into() };
                    let b = if tb { b_nk.t() } else { (&b_kn).into() };
                    let run = gemm::gemm_with_config(&gpu, cfg, a, b, &mut c, &epi);
                    if refused_by_tma(cfg, k, &run) {
                        continue;
                    }
                    run.unwrap();
                    let what = format!("gemm ta={ta} tb={tb} {batch}×{m}×{n}×{k} shared b={shared} {cfg:?} (seed {seed})");
                    assert_close(&gpu.download(&c).unwrap(), &want, &what);
                }
            }
        }
    }
}

/// The grouped forms: ten heads (and one) of odd widths on one input, with
/// biases and GELU, and the shared-input GEMM, against float64; then the
/// shape checks.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn grouped_gemms_match_float64() {
    use rustile_ops::grouped_gemm;
    let Some(gpu) = gpu_or_skip("grouped_gemms_match_float64") else { return };
    for dims in [[1001, 512, 10, 1365, 3], [77, 40, 1, 91, 5]] {
        let [rows, d, g, h, out] = dims;
        let (mut rng, seed) = rng();
        let [x, w1, b1, w2, b2] = testing::heads_inputs::<bf16>(&mut rng, dims);
        let (dx, dw1, db1) = (up(&gpu, &x, &[rows, d]), up(&gpu, &w1, &[g, h, d]), up(&gpu, &b1, &[g, h]));
        let (dw2, db2) = (up(&gpu, &w2, &[g, out, h]), up(&gpu, &b2, &[g, out]));
        let mut y = poisoned::<bf16>(&gpu, &[rows, g, out]);
        grouped_gemm::heads_mlp(&gpu, &dx, &dw1, Some(&db1), gemm::Act::GeluTanh, &dw2, Some(&db2), &mut y).unwrap();
        let round = |v: f64| bf16::from_f32(v as f32).to_f32() as f64;
        let want = reference::heads_mlp(&wide(&x), &wide(&w1), &wide(&b1), gemm::Act::GeluTanh, &wide(&w2), &wide(&b2), dims, round);
        assert_close(&gpu.download(&y).unwrap(), &want, &format!("heads_mlp {dims:?} (seed {seed})"));

        // The first layer alone: one GEMM against the stacked weights.
        let mut hidden = poisoned::<bf16>(&gpu, &[rows, g, h]);
        grouped_gemm::shared_input(&gpu, &dx, &dw1, &mut hidden, &gemm::Epilogue::new().bias_per_column(&db1)).unwrap();
        let b1 = wide(&b1);
        let want: Vec<f64> = reference::matmul_nt(&wide(&x), &wide(&w1), rows, g * h, d).iter().enumerate().map(|(i, v)| v + b1[i % (g * h)]).collect();
        assert_close(&gpu.download(&hidden).unwrap(), &want, &format!("shared_input {dims:?} (seed {seed})"));
    }
    let (x, w, w_bad) = (gpu.alloc::<bf16>(&[8, 16]).unwrap(), gpu.alloc::<bf16>(&[3, 5, 16]).unwrap(), gpu.alloc::<bf16>(&[3, 5, 15]).unwrap());
    let mut y = gpu.alloc::<bf16>(&[8, 3, 5]).unwrap();
    let err = grouped_gemm::shared_input(&gpu, &x, &w_bad, &mut y, &gemm::Epilogue::new()).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    let mut y_bad = gpu.alloc::<bf16>(&[8, 15]).unwrap();
    assert!(matches!(grouped_gemm::shared_input(&gpu, &x, &w, &mut y_bad, &gemm::Epilogue::new()), Err(Error::Shape(_))));
}

/// Groups of different sizes in one launch (packed, odd sizes, a group
/// without rows and one with K = 0), every config of each kernel this GPU
/// has, beside float64; and what `gemm_groups` refuses.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_groups_match_float64() {
    use rustile_ops::grouped_gemm::{gemm_groups, grouped_gemm_kernel, grouped_gemm_wgmma_kernel, packed_offsets, Groups};
    let Some(gpu) = gpu_or_skip("gemm_groups_match_float64") else { return };
    let sizes = [[300, 517, 72], [0, 64, 64], [1, 1030, 520], [777, 130, 77], [64, 64, 0], [2048, 256, 128]];
    let (mut rng, seed) = rng();
    let at = packed_offsets(&sizes);
    let [la, lb, lc] = at[sizes.len()];
    let (a, b): (Vec<bf16>, Vec<bf16>) = (normal(&mut rng, la, 0.0, 1.0), normal(&mut rng, lb, 0.0, 1.0));
    let mut want = Vec::with_capacity(lc);
    for (&[m, n, k], &[oa, ob, _]) in sizes.iter().zip(&at) {
        want.extend(reference::matmul_nt(&wide(&a[oa..oa + m * k]), &wide(&b[ob..ob + n * k]), m, n, k));
    }
    let (da, db) = (up(&gpu, &a, &[la]), up(&gpu, &b, &[lb]));
    let mut configs: Vec<gemm::Config> = (0..grouped_gemm_kernel::CONFIGS.len()).map(gemm::Config::Mma).collect();
    if grouped_gemm_wgmma_kernel::supported(&gpu) {
        configs.extend((0..grouped_gemm_wgmma_kernel::CONFIGS.len()).map(gemm::Config::Wgmma));
    }
    let default = Groups::new(&gpu, &sizes).unwrap();
    for groups in configs.into_iter().map(|cfg| Groups::with_config(&gpu, &sizes, cfg).unwrap()).chain([default]) {
        let mut c = poisoned::<bf16>(&gpu, &[lc]);
        gemm_groups(&gpu, &groups, &da, &db, &mut c).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_groups {sizes:?} (seed {seed})"));
    }
    let groups = Groups::new(&gpu, &sizes).unwrap();
    let mut short = gpu.alloc::<bf16>(&[lc - 1]).unwrap();
    let err = gemm_groups(&gpu, &groups, &da, &db, &mut short).unwrap_err();
    assert!(matches!(&err, Error::Shape(msg) if msg.contains("c must hold")), "{err}");
    assert!(matches!(Groups::with_config(&gpu, &sizes, gemm::Config::Tma(0)), Err(Error::Launch { .. })));
}

/// Every config of the dual GEMM (`silu(a·b1ᵀ) ⊙ a·b2ᵀ`) at odd shapes,
/// plus its host API's shape checks.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
/// The NVFP4 dual GEMM at odd shapes, every config, every element.
fn dual_gemm_nvfp4_matches_float64_at_odd_shapes() {
    let Some(gpu) = gpu_or_skip("dual_gemm_nvfp4_matches_float64_at_odd_shapes") else { return };
    for shape in [(1, 1, 64), (129, 77, 192), (300, 517, 640)] {
        nvfp4_case(&gpu, shape, Nvfp4Draw::EveryCode, true);
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
/// The NVFP4 dual GEMM at GPU MODE's benchmark shapes (its draw) and test
/// shapes (its draw and normal data quantized by our kernel, in turn), the
/// default config, sampled rows.
fn dual_gemm_nvfp4_matches_float64_at_gpu_modes_shapes() {
    let Some(gpu) = gpu_or_skip("dual_gemm_nvfp4_matches_float64_at_gpu_modes_shapes") else { return };
    for shape in [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)] {
        nvfp4_case(&gpu, shape, Nvfp4Draw::GpuMode, false);
    }
    let test = [(1536, 512, 7168), (256, 512, 256), (3072, 1024, 1536), (7168, 1024, 256), (7168, 2304, 2048), (4608, 384, 7168), (7168, 384, 2304), (512, 768, 7168), (4096, 768, 512)];
    for (i, shape) in test.into_iter().enumerate() {
        nvfp4_case(&gpu, shape, if i % 2 == 0 { Nvfp4Draw::QuantizedNormal } else { Nvfp4Draw::GpuMode }, false);
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
/// The NVFP4 quantize kernel against its CPU reference, bit for bit.
fn nvfp4_quantize_matches_the_reference_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("nvfp4_quantize_matches_the_reference_bit_for_bit") else { return };
    for (rows, k) in [(1, 16), (129, 256), (1000, 7168)] {
        let (mut rng, seed) = rng();
        let x: Vec<bf16> = normal(&mut rng, rows * k, 0.0, 3.0);
        let (mut q, mut s) = (gpu.alloc(&[rows, k / 2]).unwrap(), gpu.alloc(&[rows, k / 16]).unwrap());
        rustile_ops::nvfp4::quantize(&gpu, &up(&gpu, &x, &[rows, k]), &mut q, &mut s).unwrap();
        let (want_q, want_s) = rustile_ops::nvfp4::quantize_cpu(&x, rows, k);
        assert!(gpu.download(&q).unwrap() == want_q && gpu.download(&s).unwrap() == want_s, "nvfp4 quantize {rows}×{k} (seed {seed})");
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Nvfp4Draw {
    /// Every E2M1 code, zero and subnormal scales among the rest.
    EveryCode,
    GpuMode,
    QuantizedNormal,
}

/// One NVFP4 dual GEMM against float64 of its dequantized operands at GPU
/// MODE's tolerance: every row and config (`all`), or three rows of the default.
fn nvfp4_case(gpu: &Gpu, (m, n, k): (usize, usize, usize), draw: Nvfp4Draw, all: bool) {
    use dual_gemm_nvfp4::{dual_gemm_nvfp4, dual_gemm_nvfp4_with_config, Config};
    use rustile_ops::nvfp4::{dequantize_cpu, quantize, Nvfp4};
    let (mut rng, seed) = rng();
    let mut operand = |rows: usize| {
        let (q, s) = match draw {
            Nvfp4Draw::EveryCode => return testing::nvfp4_random(&mut rng, rows, k, true),
            Nvfp4Draw::GpuMode => testing::nvfp4_gpu_mode(&mut rng, rows, k),
            Nvfp4Draw::QuantizedNormal => {
                let x = up(gpu, &normal::<bf16>(&mut rng, rows * k, 0.0, 1.0), &[rows, k]);
                let (mut q, mut s) = (gpu.alloc(&[rows, k / 2]).unwrap(), gpu.alloc(&[rows, k / 16]).unwrap());
                quantize(gpu, &x, &mut q, &mut s).unwrap();
                (gpu.download(&q).unwrap(), gpu.download(&s).unwrap())
            }
        };
        let wide = dequantize_cpu(&q, &s, rows, k).into_iter().map(f64::from).collect();
        (q, s, wide)
    };
    let ops: Vec<_> = [m, n, n].into_iter().map(&mut operand).collect();
    let dev: Vec<_> = ops.iter().zip([m, n, n]).map(|((v, s, _), rows)| (up(gpu, v, &[rows, k / 2]), up(gpu, s, &[rows, k / 16]))).collect();
    let op = |j: usize| Nvfp4 { values: &dev[j].0, scales: &dev[j].1 };
    let rows: Vec<usize> = if all { (0..m).collect() } else { vec![0, m / 2, m - 1] };
    let ga = testing::gather_rows(&ops[0].2, &rows, k);
    let gate = reference::matmul_nt(&ga, &ops[1].2, rows.len(), n, k);
    let want = reference::swiglu(&gate, &reference::matmul_nt(&ga, &ops[2].2, rows.len(), n, k));
    let check_single = |c: &Tensor<f16>, want: &[f64], what: &str| {
        let got = gpu.download(c).unwrap();
        for (i, &r) in rows.iter().enumerate() {
            if let Some((j, g, w)) = testing::nvfp4_outside_tolerance(&got[r * n..(r + 1) * n], &want[i * n..(i + 1) * n]) {
                panic!("{what} {m}×{n}×{k}, {draw:?} (seed {seed}): c[{r}, {j}] = {g}, want {w}");
            }
        }
    };
    let check = |c: &Tensor<f16>, what: &str| check_single(c, &want, &format!("dual_gemm_nvfp4 {what}"));
    for cfg in Config::all(gpu).into_iter().filter(|_| all) {
        let mut c = poisoned::<f16>(gpu, &[m, n]);
        dual_gemm_nvfp4_with_config(gpu, cfg, op(0), op(1), op(2), &mut c).unwrap();
        check(&c, &cfg.describe());
    }
    let mut c = poisoned::<f16>(gpu, &[m, n]);
    dual_gemm_nvfp4(gpu, op(0), op(1), op(2), &mut c).unwrap();
    check(&c, "default");
    // The single product, A·B₁ᵀ, on the same operands.
    for cfg in dual_gemm_nvfp4::GemmConfig::all(gpu).into_iter().filter(|_| all) {
        let mut c = poisoned::<f16>(gpu, &[m, n]);
        dual_gemm_nvfp4::gemm_nvfp4_with_config(gpu, cfg, op(0), op(1), &mut c).unwrap();
        check_single(&c, &gate, &format!("gemm_nvfp4 {cfg:?}"));
    }
    let mut c = poisoned::<f16>(gpu, &[m, n]);
    dual_gemm_nvfp4::gemm_nvfp4(gpu, op(0), op(1), &mut c).unwrap();
    check_single(&c, &gate, "gemm_nvfp4 default");
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn dual_gemm_matches_float64() {
    let Some(gpu) = gpu_or_skip("dual_gemm_matches_float64") else { return };
    for (m, n, k) in [(1, 1, 1), (70, 33, 48), (300, 517, 264), (777, 1030, 520), (129, 200, 75)] {
        let (mut rng, seed) = rng();
        let a: Vec<bf16> = normal(&mut rng, m * k, 0.0, 1.0);
        let b1: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
        let b2: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
        let (da, db1, db2) = (up(&gpu, &a, &[m, k]), up(&gpu, &b1, &[n, k]), up(&gpu, &b2, &[n, k]));
        let want = reference::swiglu(&reference::matmul_nt(&wide(&a), &wide(&b1), m, n, k), &reference::matmul_nt(&wide(&a), &wide(&b2), m, n, k));
        let mma = (0..dual_gemm::dual_gemm_kernel::CONFIGS.len()).map(gemm::Config::Mma);
        let tma = (0..dual_gemm::dual_gemm_tma_kernel::CONFIGS.len()).map(gemm::Config::Tma);
        let hopper = dual_gemm::dual_gemm_tma_kernel::supported(&gpu);
        for cfg in mma.chain(tma.filter(|_| hopper)) {
            let mut c = poisoned::<bf16>(&gpu, &[m, n]);
            let run = dual_gemm::dual_gemm_with_config(&gpu, cfg, &da, &db1, &db2, &mut c);
            if matches!(cfg, gemm::Config::Tma(_)) && k % 8 != 0 {
                assert!(matches!(run, Err(Error::Shape(_))), "dual_gemm {m}×{n}×{k} {cfg:?}: the TMA kernel must refuse k % 8 != 0");
                continue;
            }
            run.unwrap();
            assert_close(&gpu.download(&c).unwrap(), &want, &format!("dual_gemm {m}×{n}×{k} {cfg:?} (seed {seed})"));
        }
        let mut c = poisoned::<bf16>(&gpu, &[m, n]);
        dual_gemm::dual_gemm(&gpu, &da, &db1, &db2, &mut c).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("dual_gemm {m}×{n}×{k} default (seed {seed})"));
    }
    let (a, b) = (gpu.alloc::<bf16>(&[8, 16]).unwrap(), gpu.alloc::<bf16>(&[4, 16]).unwrap());
    let (other, mut c) = (gpu.alloc::<bf16>(&[5, 16]).unwrap(), gpu.alloc::<bf16>(&[8, 4]).unwrap());
    assert!(matches!(dual_gemm::dual_gemm(&gpu, &a, &b, &other, &mut c), Err(Error::Shape(_))));
}

/// QuasarAttention's projection and convolution in one kernel (Hopper; the
/// GEMM then the convolution elsewhere), every config, at odd lengths,
/// with blocks that straddle sequences and a `hidden` the copy engine
/// cannot read.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn proj_conv_silu_matches_float64() {
    use rustile_ops::quasar::{proj_conv_silu, proj_conv_silu_kernel, proj_conv_silu_with_config, WIDTH};
    let Some(gpu) = gpu_or_skip("proj_conv_silu_matches_float64") else { return };
    for (batch, tokens, hidden, channels) in [(1, 1, 64, 16), (3, 129, 72, 136), (2, 1000, 512, 512), (1, 4097, 128, 264), (2, 33, 20, 24)] {
        let (mut rng, seed) = rng();
        let x: Vec<bf16> = normal(&mut rng, batch * tokens * hidden, 0.0, 1.0);
        let wp: Vec<bf16> = normal(&mut rng, channels * hidden, 0.0, 1.0 / (hidden as f32).sqrt());
        let w: Vec<bf16> = normal(&mut rng, WIDTH * channels, 0.0, 0.5);
        let (pre_want, y_want) = reference::proj_conv_silu(&wide(&x), &wide(&wp), &wide(&w), tokens, hidden, channels);
        let (xt, wpt, wt) = (up(&gpu, &x, &[batch, tokens, hidden]), up(&gpu, &wp, &[channels, hidden]), up(&gpu, &w, &[WIDTH, channels]));
        let shape = [batch, tokens, channels];
        let configs = if proj_conv_silu_kernel::supported(&gpu) { proj_conv_silu_kernel::CONFIGS.len() } else { 0 };
        let runs = (0..configs).map(Some).chain([None]);
        for cfg in runs {
            let ctx = format!("proj_conv_silu [{batch}, {tokens}, {hidden}] → {channels}, config {cfg:?} (seed {seed})");
            let (mut pre, mut y) = (poisoned::<bf16>(&gpu, &shape), poisoned::<bf16>(&gpu, &shape));
            proj_conv_silu_with_config(&gpu, cfg, &xt, &wpt, &wt, Some(&mut pre), &mut y).unwrap();
            let (ep, ey) = (rel_err(&gpu.download(&pre).unwrap(), &pre_want), rel_err(&gpu.download(&y).unwrap(), &y_want));
            assert!(ep < tolerance::<bf16>() && ey < tolerance::<bf16>(), "{ctx}: pre off by {ep:.2e}, y by {ey:.2e}");
            let mut y2 = poisoned::<bf16>(&gpu, &shape);
            proj_conv_silu(&gpu, &xt, &wpt, &wt, None, &mut y2).unwrap();
            let ey2 = rel_err(&gpu.download(&y2).unwrap(), &y_want);
            assert!(ey2 < tolerance::<bf16>(), "{ctx}: y without pre off by {ey2:.2e}");
        }
    }
}

/// QuasarAttention's short convolution and its one-pass backward against
/// float64, every config of the backward, at odd lengths (blocks of 32 to
/// 128 rows: a sequence shorter than one, ragged last blocks), channels not
/// a multiple of a program's and not of 8.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn conv_silu_and_its_backward_match_float64() {
    use rustile_ops::quasar::{conv_silu, conv_silu_backward_with_config, conv_silu_bwd_kernel, ConvScratch, WIDTH};
    let Some(gpu) = gpu_or_skip("conv_silu_and_its_backward_match_float64") else { return };
    for (batch, tokens, channels) in [(1, 1, 8), (3, 129, 136), (2, 1000, 512), (1, 4097, 264), (2, 33, 20)] {
        let (mut rng, seed) = rng();
        let shape = [batch, tokens, channels];
        let n = batch * tokens * channels;
        let (x, dy): (Vec<bf16>, Vec<bf16>) = (normal(&mut rng, n, 0.0, 1.0), normal(&mut rng, n, 0.0, 1.0));
        let w: Vec<bf16> = normal(&mut rng, WIDTH * channels, 0.0, 0.5);
        let (xt, dyt, wt) = (up(&gpu, &x, &shape), up(&gpu, &dy, &shape), up(&gpu, &w, &[WIDTH, channels]));
        let mut y = poisoned::<bf16>(&gpu, &shape);
        conv_silu(&gpu, &xt, &wt, &mut y).unwrap();
        let ey = rel_err(&gpu.download(&y).unwrap(), &reference::conv_silu(&wide(&x), &wide(&w), tokens, channels));
        assert!(ey < tolerance::<bf16>(), "conv_silu [{batch}, {tokens}, {channels}] (seed {seed}): y off by {ey:.2e}");
        let (want_dx, want_dw) = reference::conv_silu_backward(&wide(&x), &wide(&w), &wide(&dy), tokens, channels);
        let mut scratch = ConvScratch::new(&gpu, &shape).unwrap();
        for cfg in 0..conv_silu_bwd_kernel::CONFIGS.len() {
            let ctx = format!("conv_silu_backward [{batch}, {tokens}, {channels}], config {cfg} (seed {seed})");
            let mut dx = poisoned::<bf16>(&gpu, &shape);
            let mut dw = poisoned::<f32>(&gpu, &[WIDTH, channels]);
            conv_silu_backward_with_config(&gpu, Some(cfg), &xt, &wt, &dyt, &mut dx, &mut dw, &mut scratch).unwrap();
            let (edx, edw) = (rel_err(&gpu.download(&dx).unwrap(), &want_dx), rel_err(&gpu.download(&dw).unwrap(), &want_dw));
            // dx is rounded to bf16 once (about 1.7e-3); dw is f32 sums of f32 products (rcp.approx in silu').
            assert!(edx < 3e-3 && edw < 1e-4, "{ctx}: dx off by {edx:.2e}, dw by {edw:.2e}");
        }
    }
}

/// QuasarAttention's gated norm in the output projection's prologue
/// against float64 (one kernel on Hopper, the three steps elsewhere),
/// every config, at odd row counts, output widths past a block and not a
/// multiple of 8, and a gate rank other than 64 (the unfused path).
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gated_out_proj_matches_float64() {
    use rustile_ops::quasar::{gated_out_proj, gated_out_proj_kernel, gated_out_proj_with_config, HEAD};
    let Some(gpu) = gpu_or_skip("gated_out_proj_matches_float64") else { return };
    for (rows, heads, rank, n_out) in [(1, 1, 64, 16), (129, 2, 64, 136), (1000, 8, 64, 512), (4097, 8, 64, 300), (33, 3, 16, 40)] {
        let (mut rng, seed) = rng();
        let channels = heads * HEAD;
        let o: Vec<bf16> = normal(&mut rng, rows * channels, 0.0, 2.0);
        let g1: Vec<bf16> = normal(&mut rng, rows * rank, 0.0, 1.0);
        let wg2: Vec<bf16> = normal(&mut rng, channels * rank, 0.0, 1.0 / (rank as f32).sqrt());
        let bias: Vec<bf16> = normal(&mut rng, channels, 0.0, 0.5);
        let w: Vec<bf16> = normal(&mut rng, HEAD, 1.0, 0.3);
        let wo: Vec<bf16> = normal(&mut rng, n_out * channels, 0.0, 1.0 / (channels as f32).sqrt());
        let want = reference::gated_out_proj(&wide(&o), &wide(&g1), &wide(&wg2), &wide(&bias), &wide(&w), &wide(&wo), 1e-5, channels);
        let (ot, g1t, wg2t) = (up(&gpu, &o, &[rows, channels]), up(&gpu, &g1, &[rows, rank]), up(&gpu, &wg2, &[channels, rank]));
        let (bt, wt, wot) = (up(&gpu, &bias, &[channels]), up(&gpu, &w, &[HEAD]), up(&gpu, &wo, &[n_out, channels]));
        let configs = if gated_out_proj_kernel::supported(&gpu) && rank == HEAD { gated_out_proj_kernel::CONFIGS.len() } else { 0 };
        for cfg in (0..configs).map(Some).chain([None]) {
            let ctx = format!("gated_out_proj [{rows}, {heads}·64], rank {rank} → {n_out}, config {cfg:?} (seed {seed})");
            let mut out = poisoned::<bf16>(&gpu, &[rows, n_out]);
            match cfg {
                Some(_) => gated_out_proj_with_config(&gpu, cfg, &ot, &g1t, &wg2t, &bt, &wt, &wot, 1e-5, &mut out).unwrap(),
                None => gated_out_proj(&gpu, &ot, &g1t, &wg2t, &bt, &wt, &wot, 1e-5, &mut out).unwrap(),
            }
            let err = rel_err(&gpu.download(&out).unwrap(), &want);
            assert!(err < tolerance::<bf16>(), "{ctx}: out off by {err:.2e}");
        }
    }
}

fn fp8_case<TA: Elem, TB: Elem>(gpu: &Gpu, [m, n, k]: [usize; 3]) {
    use gemm_fp8::Scale;
    let (mut rng, seed) = rng();
    let (a, b): (Vec<TA>, Vec<TB>) = (normal(&mut rng, m * k, 0.0, 2.0), normal(&mut rng, n * k, 0.0, 2.0));
    let (sa, sb): (Vec<f32>, Vec<f32>) = (normal(&mut rng, m, 1.0, 0.5), vec![0.37]);
    let bias: Vec<bf16> = normal(&mut rng, n, 0.0, 3.0);
    let (da, db, dsa, dsb, dbias) = (up(gpu, &a, &[m, k]), up(gpu, &b, &[n, k]), up(gpu, &sa, &[m]), up(gpu, &sb, &[1]), up(gpu, &bias, &[n]));
    let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    let e = gemm::Epi { alpha: 0.5, beta: 0.0, bias: gemm::Bias::PerColumn, act: gemm::Act::Silu, residual: false };
    let want: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&e, ab[i] * sa[i / n] as f64 * 0.37, bias[i % n].to_f32() as f64, 0.0, 0.0)).collect();
    let epi = gemm::Epilogue::new().scale(0.5).bias_per_column(&dbias).act(gemm::Act::Silu);
    for cfg in 0..gemm_fp8::gemm_fp8_kernel::CONFIGS.len() {
        let mut c = poisoned::<bf16>(gpu, &[m, n]);
        gemm_fp8::gemm_fp8_with_config(gpu, cfg, &da, &db, &mut c, Scale::Rows(&dsa), Scale::Tensor(&dsb), &epi).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_fp8<{} × {}> {m}×{n}×{k} cfg={cfg} (seed {seed})", TA::NAME, TB::NAME));
    }
    // The plain product, per-column scales of b, through the tuned dispatch.
    let sbn: Vec<f32> = normal(&mut rng, n, 1.0, 0.5);
    let dsbn = up(gpu, &sbn, &[n]);
    let want: Vec<f64> = (0..m * n).map(|i| ab[i] * sbn[i % n] as f64).collect();
    let mut c = poisoned::<bf16>(gpu, &[m, n]);
    gemm_fp8::gemm_fp8(gpu, &da, &db, &mut c, Scale::None, Scale::Rows(&dsbn), &gemm::Epilogue::new()).unwrap();
    assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_fp8<{} × {}> {m}×{n}×{k} default (seed {seed})", TA::NAME, TB::NAME));
}

/// Every config of the FP8 GEMM, both formats and their mixes, at odd M and N, with the
/// scales and a fused epilogue; and what it refuses.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_fp8_matches_float64() {
    let Some(gpu) = hopper_or_skip("gemm_fp8_matches_float64") else { return };
    for shape in [[1, 1, 16], [70, 33, 48], [300, 517, 272], [777, 1030, 528]] {
        fp8_case::<rustile::F8E4M3, rustile::F8E4M3>(&gpu, shape);
        fp8_case::<rustile::F8E5M2, rustile::F8E5M2>(&gpu, shape);
        fp8_case::<rustile::F8E5M2, rustile::F8E4M3>(&gpu, shape);
        fp8_case::<rustile::F8E4M3, rustile::F8E5M2>(&gpu, shape);
    }
    let (a, b) = (gpu.alloc::<rustile::F8E4M3>(&[8, 40]).unwrap(), gpu.alloc::<rustile::F8E4M3>(&[4, 40]).unwrap());
    let mut c = gpu.alloc::<bf16>(&[8, 4]).unwrap();
    let none = gemm_fp8::Scale::None;
    let err = gemm_fp8::gemm_fp8(&gpu, &a, &b, &mut c, none, none, &gemm::Epilogue::new()).unwrap_err();
    assert!(matches!(&err, Error::Shape(msg) if msg.contains("multiple of 16")), "k = 40: {err}");
    let (a16, b16) = (gpu.alloc::<bf16>(&[8, 48]).unwrap(), gpu.alloc::<bf16>(&[4, 48]).unwrap());
    assert!(matches!(gemm_fp8::gemm_fp8(&gpu, &a16, &b16, &mut c, none, none, &gemm::Epilogue::new()), Err(Error::DType(_))));
    let (a, b) = (gpu.alloc::<rustile::F8E4M3>(&[8, 48]).unwrap(), gpu.alloc::<rustile::F8E4M3>(&[4, 48]).unwrap());
    let short = gpu.alloc::<f32>(&[3]).unwrap();
    let err = gemm_fp8::gemm_fp8(&gpu, &a, &b, &mut c, gemm_fp8::Scale::Rows(&short), none, &gemm::Epilogue::new()).unwrap_err();
    assert!(matches!(&err, Error::Shape(msg) if msg.contains("a's scale")), "a scale of 3 rows for 8: {err}");
}

/// Operands of a GEMM with the whole fused epilogue (bias per column,
/// residual), on the host, in float64 (the product) and on the GPU
/// (`[a, b, bias, residual]`).
struct EpilogueCase {
    a: Vec<bf16>,
    b: Vec<bf16>,
    bias: Vec<bf16>,
    res: Vec<bf16>,
    ab: Vec<f64>,
    dev: [Tensor<bf16>; 4],
}

impl EpilogueCase {
    fn new(gpu: &Gpu, rng: &mut rand::rngs::StdRng, [m, n, k]: [usize; 3]) -> EpilogueCase {
        let a: Vec<bf16> = normal(rng, m * k, 0.0, 1.0);
        let b: Vec<bf16> = normal(rng, n * k, 0.0, 1.0);
        let bias: Vec<bf16> = normal(rng, n, 0.0, 3.0);
        let res: Vec<bf16> = normal(rng, m * n, 0.0, 2.0);
        let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
        let dev = [up(gpu, &a, &[m, k]), up(gpu, &b, &[n, k]), up(gpu, &bias, &[n]), up(gpu, &res, &[m, n])];
        EpilogueCase { a, b, bias, res, ab, dev }
    }

    /// `gelu(0.5·a·bᵀ + bias) + residual − 0.75·c`.
    fn fused(&self) -> gemm::Epilogue<'_, bf16> {
        gemm::Epilogue::new().scale(0.5).accumulate(-0.75).bias_per_column(&self.dev[2]).act(gemm::Act::GeluTanh).residual(&self.dev[3])
    }
}

/// Outputs of another type than the operands, each config of every GEMM
/// kernel and each layout it takes, beside the same program in the CPU
/// interpreter and float64:
/// bf16 → f32 with the whole epilogue (β reading f32) and an output scale,
/// bf16 → e4m3 scaled to saturate, both with the amax; the FP8 GEMM's
/// e4m3 → e4m3; and what is refused.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_cast_outputs_match_float64() {
    use gemm::{Cast, Plan};
    use rustile::F8E4M3;
    let Some(gpu) = hopper_or_skip("gemm_cast_outputs_match_float64") else { return };
    let (m, n, k) = (300, 259, 136);
    let (mut rng, seed) = rng();
    let p = EpilogueCase::new(&gpu, &mut rng, [m, n, k]);
    let (a, b, bias, res, ab) = (&p.a, &p.b, &p.bias, &p.res, &p.ab);
    let old: Vec<f32> = normal(&mut rng, m * n, 0.0, 2.0);
    let [da, db, ..] = &p.dev;
    let fused = p.fused();
    let e = fused.epi();
    let y = |e: &gemm::Epi, i: usize| reference::epilogue(e, ab[i], bias[i % n].to_f32() as f64, res[i].to_f32() as f64, old[i] as f64);
    let (y32, y8): (Vec<f64>, Vec<f64>) = (0..m * n).map(|i| (y(&e, i), y(&gemm::Epi { beta: 0.0, ..e }, i))).unzip();
    let s8 = (600.0 / y8.iter().fold(0.0f64, |t, v| t.max(v.abs()))) as f32;
    let (two, ds8) = (up(&gpu, &[2.0f32], &[1]), up(&gpu, &[s8], &[1]));
    let fused8 = fused.accumulate(0.0);
    // Every kernel and config in the layout it takes (A [m, k], B [n, k]),
    // and the mma.sync kernels in the other three (A stored [k, m], B [k, n]).
    let (at, bt) = (testing::transpose(a, 1, m, k), testing::transpose(b, 1, n, k));
    let (dat, dbt) = (up(&gpu, &at, &[k, m]), up(&gpu, &bt, &[k, n]));
    let mut cases: Vec<(bool, bool, gemm::Config)> = nt_configs(&gpu).into_iter().map(|c| (false, true, c)).collect();
    for (ta, tb) in [(false, false), (true, false), (true, true)] {
        cases.extend((0..gemm::gemm_nt_kernel::CONFIGS.len()).map(|c| (ta, tb, gemm::Config::Mma(c))));
    }
    for (ta, tb, cfg) in cases {
        let ctx = format!("gemm ta={ta} tb={tb} {m}×{n}×{k} {cfg:?} (seed {seed})");
        let plan = Plan { m, n, k, batch: 1, ld: [if ta { m } else { k }, if tb { k } else { n }, n], stride: [0, 0, m * n, 0], ta, tb };
        let (da, db) = (if ta { &dat } else { da }, if tb { db } else { &dbt });
        let (ha, hb) = (if ta { &at } else { a }, if tb { b } else { &bt });
        let (mut c, mut amax) = (up(&gpu, &old, &[m, n]), up(&gpu, &[0.0f32], &[1]));
        gemm::launch_plan_cast(&gpu, Some(cfg), &plan, da, db, &mut c, &fused, Cast { scale: Some(&two), amax: Some(&mut amax) }).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &y32.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), &format!("{ctx} → f32"));
        let got = gpu.download(&amax).unwrap()[0];
        let (top, ok) = testing::amax_matches(got, &y32, 1e-5);
        assert!(ok, "{ctx} → f32: amax {got} instead of {top}");

        let (mut c8, mut amax) = (poisoned::<F8E4M3>(&gpu, &[m, n]), up(&gpu, &[0.0f32], &[1]));
        gemm::launch_plan_cast(&gpu, Some(cfg), &plan, da, db, &mut c8, &fused8, Cast { scale: Some(&ds8), amax: Some(&mut amax) }).unwrap();
        let got8 = gpu.download(&c8).unwrap();
        testing::assert_e4m3_close(&got8, &y8.iter().map(|v| s8 as f64 * v).collect::<Vec<_>>(), &format!("{ctx} → e4m3"));
        // Hopper's paired conversion against the interpreter's: the same bytes.
        let mut cpu8 = vec![F8E4M3(0); m * n];
        gemm::launch_plan_cast_cpu(cfg, &plan, [&ha[..], &hb[..], &bias[..], &res[..]], &mut cpu8, fused8.epi(), &[s8], &mut []);
        let differ = got8.iter().zip(&cpu8).filter(|(g, c)| g != c).count();
        assert!(differ * 1000 <= m * n, "{ctx} → e4m3: {differ} of {} bytes differ from the interpreter's", m * n);
        let got = gpu.download(&amax).unwrap()[0];
        let (top, ok) = testing::amax_matches(got, &y8, 1e-5);
        assert!(ok, "{ctx} → e4m3: amax {got} instead of {top}");
    }
    // The public entry, tuned dispatch, f16 → f32, plain.
    let (a16, b16): (Vec<f16>, Vec<f16>) = (normal(&mut rng, m * k, 0.0, 1.0), normal(&mut rng, n * k, 0.0, 1.0));
    let want = reference::matmul_nt(&wide(&a16), &wide(&b16), m, n, k);
    let (da16, db16) = (up(&gpu, &a16, &[m, k]), up(&gpu, &b16, &[n, k]));
    let mut c = poisoned::<f32>(&gpu, &[m, n]);
    use gemm::Transpose;
    gemm::gemm_cast(&gpu, &da16, db16.t(), &mut c, &gemm::Epilogue::new(), Cast::default()).unwrap();
    assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_cast<f16 → f32> (seed {seed})"));
    // e4m3 → e4m3 on the FP8 GEMM (whose k is a multiple of 16).
    let k = 144;
    let (a8, b8): (Vec<F8E4M3>, Vec<F8E4M3>) = (normal(&mut rng, m * k, 0.0, 2.0), normal(&mut rng, n * k, 0.0, 2.0));
    let y: Vec<f64> = reference::matmul_nt(&wide(&a8), &wide(&b8), m, n, k).iter().map(|v| 0.37 * v).collect();
    let s = (500.0 / y.iter().fold(0.0f64, |t, v| t.max(v.abs()))) as f32;
    let (da8, db8, ds) = (up(&gpu, &a8, &[m, k]), up(&gpu, &b8, &[n, k]), up(&gpu, &[s], &[1]));
    let (mut c8, mut amax) = (poisoned::<F8E4M3>(&gpu, &[m, n]), up(&gpu, &[0.0f32], &[1]));
    let none = gemm_fp8::Scale::None;
    gemm_fp8::gemm_fp8_cast(&gpu, &da8, &db8, &mut c8, none, none, &gemm::Epilogue::new().scale(0.37), Cast { scale: Some(&ds), amax: Some(&mut amax) }).unwrap();
    testing::assert_e4m3_close(&gpu.download(&c8).unwrap(), &y.iter().map(|v| s as f64 * v).collect::<Vec<_>>(), &format!("gemm_fp8_cast (seed {seed})"));
    let got = gpu.download(&amax).unwrap()[0];
    let (top, ok) = testing::amax_matches(got, &y, 1e-3);
    assert!(ok, "gemm_fp8_cast: amax {got} instead of {top}");
    // Refused: f16 → e4m3.
    let mut c8 = gpu.alloc::<F8E4M3>(&[m, n]).unwrap();
    assert!(matches!(gemm::gemm_cast(&gpu, &da16, db16.t(), &mut c8, &gemm::Epilogue::new(), Cast::default()), Err(Error::DType(_))));
    // Rows the copy engine cannot read (k = 77): the tuned dispatch's cp.async kernel writes f32.
    let (a77, b77): (Vec<bf16>, Vec<bf16>) = (normal(&mut rng, m * 77, 0.0, 1.0), normal(&mut rng, n * 77, 0.0, 1.0));
    let want = reference::matmul_nt(&wide(&a77), &wide(&b77), m, n, 77);
    let mut c = poisoned::<f32>(&gpu, &[m, n]);
    gemm::gemm_cast(&gpu, &up(&gpu, &a77, &[m, 77]), up(&gpu, &b77, &[n, 77]).t(), &mut c, &gemm::Epilogue::new(), Cast::default()).unwrap();
    assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_cast<bf16 → f32> k = 77 (seed {seed})"));
}

/// The MLP blocks at d_model 512 / d_ff 1365 (the hidden rows are not
/// 16-byte aligned, so the second GEMM takes the masked copy path).
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn mlp_blocks_match_float64() {
    let Some(gpu) = gpu_or_skip("mlp_blocks_match_float64") else { return };
    let (rows, d_model, d_ff) = (1001, 512, 1365);
    let (mut rng, seed) = rng();
    let x: Vec<bf16> = normal(&mut rng, rows * d_model, 0.0, 1.0);
    let w: Vec<Vec<bf16>> = (0..3).map(|_| normal(&mut rng, d_ff * d_model, 0.0, 1.0 / (d_model as f32).sqrt())).collect();
    let w2: Vec<bf16> = normal(&mut rng, d_model * d_ff, 0.0, 1.0 / (d_ff as f32).sqrt());
    let (dx, dw2) = (up(&gpu, &x, &[rows, d_model]), up(&gpu, &w2, &[d_model, d_ff]));
    let dw: Vec<Tensor<bf16>> = w.iter().map(|w| up(&gpu, w, &[d_ff, d_model])).collect();
    let round = |h: Vec<f64>| h.iter().map(|&v| bf16::from_f64(v).to_f64()).collect::<Vec<_>>();
    let pre = reference::matmul_nt(&wide(&x), &wide(&w[0]), rows, d_ff, d_model);
    let silu = round(pre.iter().map(|&h| h / (1.0 + (-h).exp())).collect());
    let want = reference::matmul_nt(&silu, &wide(&w2), rows, d_model, d_ff);
    let mut y = poisoned::<bf16>(&gpu, &[rows, d_model]);
    mlp::mlp(&gpu, &dx, &dw[0], gemm::Act::Silu, &dw2, &mut y).unwrap();
    assert_close(&gpu.download(&y).unwrap(), &want, &format!("mlp silu (seed {seed})"));
    let upp = reference::matmul_nt(&wide(&x), &wide(&w[1]), rows, d_ff, d_model);
    let want = reference::matmul_nt(&round(reference::swiglu(&pre, &upp)), &wide(&w2), rows, d_model, d_ff);
    let mut y = poisoned::<bf16>(&gpu, &[rows, d_model]);
    mlp::gated_mlp(&gpu, &dx, &dw[0], &dw[1], &dw2, &mut y).unwrap();
    assert_close(&gpu.download(&y).unwrap(), &want, &format!("gated mlp (seed {seed})"));
    assert!(matches!(mlp::gated_mlp(&gpu, &dx, &dw[0], &dw2, &dw2, &mut y), Err(Error::Shape(_))));
}

/// Every config of the fused-epilogue GEMM (bias per column, GELU, residual,
/// α and β at once) and of the soft-capped GEMM, at an odd shape.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_epilogues_match_float64() {
    let Some(gpu) = gpu_or_skip("gemm_epilogues_match_float64") else { return };
    let (m, n, k) = (300, 259, 136);
    let (mut rng, seed) = rng();
    let p = EpilogueCase::new(&gpu, &mut rng, [m, n, k]);
    let (bias, res, ab) = (&p.bias, &p.res, &p.ab);
    let old: Vec<bf16> = normal(&mut rng, m * n, 0.0, 2.0);
    let [da, db, ..] = &p.dev;
    let fused = p.fused();
    let e = fused.epi();
    let want: Vec<f64> =
        (0..m * n).map(|i| reference::epilogue(&e, ab[i], bias[i % n].to_f32() as f64, res[i].to_f32() as f64, old[i].to_f32() as f64)).collect();
    for cfg in nt_configs(&gpu) {
        let mut c = up(&gpu, &old, &[m, n]);
        gemm::gemm_nt_with_config(&gpu, cfg, da, db, &mut c, &fused).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_nt {e:?} {cfg:?} (seed {seed})"));
    }
    let cap = 6.0;
    let want: Vec<f64> = ab.iter().map(|x| cap * (x / cap).tanh()).collect();
    for cfg in 0..gemm::gemm_softcap_kernel::CONFIGS.len() {
        let mut c = poisoned::<bf16>(&gpu, &[m, n]);
        gemm::gemm_softcap_kernel::launch(&gpu, cfg, da, db, &mut c, m, n, k, cap as f32).unwrap();
        assert_close(&gpu.download(&c).unwrap(), &want, &format!("gemm_softcap cfg={cfg} (seed {seed})"));
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_matches_float64() {
    let Some(gpu) = gpu_or_skip("gemm_matches_float64") else { return };
    for (m, n, k) in [(1, 1, 1), (17, 9, 5), (70, 33, 48), (129, 131, 77), (300, 517, 264), (1000, 260, 1031), (777, 1030, 520)] {
        gemm_case::<bf16>(&gpu, m, n, k);
        gemm_case::<f16>(&gpu, m, n, k);
    }
}

fn attention_case<T: Elem>(gpu: &Gpu, dims: attention::Dims, opt: attention::Attention) {
    let attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (mut rng, seed) = rng();
    let q: Vec<T> = normal(&mut rng, batch * sq * heads * d, 0.0, 1.0);
    let mut k: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let mut v: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    // Rows past `keys` are not the problem's (the Hopper kernels' copy
    // engine reads them anyway): NaN there must not reach the output.
    let row = kv_heads * d;
    for (z, i) in (0..batch).flat_map(|z| (opt.keys.unwrap_or(sk)..sk).map(move |i| (z, i))) {
        for x in [&mut k, &mut v] {
            x[(z * sk + i) * row..][..row].fill(T::from_f32(f32::NAN));
        }
    }
    let (dq, dk, dv) = (up(gpu, &q, &[batch, sq, heads, d]), up(gpu, &k, &[batch, sk, kv_heads, d]), up(gpu, &v, &[batch, sk, kv_heads, d]));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &[batch, sq, heads, d]), poisoned::<f32>(gpu, &[batch, heads, sq]));
    attention::attention(gpu, &dq, &dk, &dv, &mut o, &mut lse, opt).unwrap();
    let want = testing::attention_want(&q, &k, &v, dims, opt);
    let ctx = format!("attention<{}> {dims:?} {opt:?} (seed {seed})", T::NAME);
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    assert_attention_close(&o, &lse, |z, h, i| (z * heads + h) * sq + i, want, &ctx);
}

fn attention_backward_case<T: Elem>(gpu: &Gpu, dims: attention::Dims, opt: attention::Attention) {
    let attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (mut rng, seed) = rng();
    let (qs, ks) = ([batch, sq, heads, d], [batch, sk, kv_heads, d]);
    let q: Vec<T> = normal(&mut rng, qs.iter().product(), 0.0, 1.0);
    let k: Vec<T> = normal(&mut rng, ks.iter().product(), 0.0, 1.0);
    let v: Vec<T> = normal(&mut rng, ks.iter().product(), 0.0, 1.0);
    let d_o: Vec<T> = normal(&mut rng, qs.iter().product(), 0.0, 1.0);
    let (dq_, dk_, dv_, ddo) = (up(gpu, &q, &qs), up(gpu, &k, &ks), up(gpu, &v, &ks), up(gpu, &d_o, &qs));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &qs), poisoned::<f32>(gpu, &[batch, heads, sq]));
    attention::attention(gpu, &dq_, &dk_, &dv_, &mut o, &mut lse, opt).unwrap();
    let (mut dq, mut dk, mut dv) = (poisoned::<T>(gpu, &qs), poisoned::<T>(gpu, &ks), poisoned::<T>(gpu, &ks));
    attention::attention_backward(gpu, [&dq_, &dk_, &dv_, &o, &ddo], &lse, [&mut dq, &mut dk, &mut dv], opt).unwrap();
    let keys = opt.keys.unwrap_or(sk);
    let seqs: Vec<_> = (0..batch).map(|z| (z * sq, sq, z * sk, keys)).collect();
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let want = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, [heads, kv_heads, d], scale, opt.causal);
    // Key rows past `keys` are in the comparison: their gradient is zero.
    assert_grads_close(gpu, [&dq, &dk, &dv], want, &format!("attention backward<{}> {dims:?} {opt:?} (seed {seed})", T::NAME));
}

/// `[dq, dk, dv]` against float64 at twice the forward's tolerance (P and dS pass through 16 bits).
fn assert_grads_close<T: Elem>(gpu: &Gpu, got: [&Tensor<T>; 3], want: [Vec<f64>; 3], ctx: &str) {
    for ((name, got), want) in ["dq", "dk", "dv"].into_iter().zip(got).zip(want) {
        let err = rel_err(&gpu.download(got).unwrap(), &want);
        assert!(err <= 2.0 * tolerance::<T>(), "{ctx}: {name} rel err {err:.2e}");
    }
}

fn attention_varlen_backward_case(gpu: &Gpu, q_lens: &[usize], k_lens: &[usize], [heads, kv_heads, d]: [usize; 3], opt: attention::Attention) {
    let (tq, tk): (usize, usize) = (q_lens.iter().sum(), k_lens.iter().sum());
    let (mut rng, seed) = rng();
    let (qs, ks) = ([tq, heads, d], [tk, kv_heads, d]);
    let q: Vec<bf16> = normal(&mut rng, tq * heads * d, 0.0, 1.0);
    let k: Vec<bf16> = normal(&mut rng, tk * kv_heads * d, 0.0, 1.0);
    let v: Vec<bf16> = normal(&mut rng, tk * kv_heads * d, 0.0, 1.0);
    let d_o: Vec<bf16> = normal(&mut rng, tq * heads * d, 0.0, 1.0);
    let seqs = attention::SeqLens::new(gpu, q_lens, k_lens).unwrap();
    let (tq_, tk_, tv_, tdo) = (up(gpu, &q, &qs), up(gpu, &k, &ks), up(gpu, &v, &ks), up(gpu, &d_o, &qs));
    let (mut o, mut lse) = (poisoned::<bf16>(gpu, &qs), poisoned::<f32>(gpu, &[heads, tq]));
    attention::attention_varlen(gpu, &tq_, &tk_, &tv_, &seqs, &mut o, &mut lse, opt).unwrap();
    let (mut dq, mut dk, mut dv) = (poisoned::<bf16>(gpu, &qs), poisoned::<bf16>(gpu, &ks), poisoned::<bf16>(gpu, &ks));
    attention::attention_varlen_backward(gpu, [&tq_, &tk_, &tv_, &o, &tdo], &lse, &seqs, [&mut dq, &mut dk, &mut dv], opt).unwrap();
    let at = testing::packed_seqs(q_lens, k_lens);
    let want = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &at, [heads, kv_heads, d], 1.0 / (d as f64).sqrt(), opt.causal);
    assert_grads_close(gpu, [&dq, &dk, &dv], want, &format!("attention_varlen_backward {q_lens:?} / {k_lens:?} d {d} {opt:?} (seed {seed})"));
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn attention_backward_matches_float64() {
    use attention::{Attention, Dims};
    let Some(gpu) = gpu_or_skip("attention_backward_matches_float64") else { return };
    let dims = |batch, sq, sk, heads, kv_heads, d| Dims { batch, sq, sk, heads, kv_heads, d };
    for d in [64, 72, 96, 128] {
        attention_backward_case::<bf16>(&gpu, dims(2, 17, 17, 2, 2, d), Attention::default());
        attention_backward_case::<bf16>(&gpu, dims(1, 1000, 1000, 2, 1, d), Attention::causal());
        attention_backward_case::<f16>(&gpu, dims(1, 333, 257, 3, 3, d), Attention::default());
    }
    attention_backward_case::<bf16>(&gpu, dims(1, 1099, 1099, 4, 2, 64), Attention::default().keys(1000));
    attention_backward_case::<bf16>(&gpu, dims(1, 130, 4099, 2, 2, 72), Attention::default());
    attention_backward_case::<bf16>(&gpu, dims(1, 2100, 2100, 2, 1, 128), Attention::default());
    let (q_lens, k_lens) = ([17, 1, 0, 1000, 130, 5, 40], [20, 1, 3, 999, 4099, 0, 300]);
    for (d, opt) in [(64, Attention::default()), (72, Attention::causal()), (96, Attention::default()), (128, Attention::causal())] {
        attention_varlen_backward_case(&gpu, &q_lens, &k_lens, [4, 2, d], opt);
    }
}

fn attention_varlen_case(gpu: &Gpu, q_lens: &[usize], k_lens: &[usize], [heads, kv_heads, d]: [usize; 3], opt: attention::Attention) {
    let (tq, tk): (usize, usize) = (q_lens.iter().sum(), k_lens.iter().sum());
    let (mut rng, seed) = rng();
    let q: Vec<bf16> = normal(&mut rng, tq * heads * d, 0.0, 1.0);
    let k: Vec<bf16> = normal(&mut rng, tk * kv_heads * d, 0.0, 1.0);
    let v: Vec<bf16> = normal(&mut rng, tk * kv_heads * d, 0.0, 1.0);
    let seqs = attention::SeqLens::new(gpu, q_lens, k_lens).unwrap();
    let (dq, dk, dv) = (up(gpu, &q, &[tq, heads, d]), up(gpu, &k, &[tk, kv_heads, d]), up(gpu, &v, &[tk, kv_heads, d]));
    let (mut o, mut lse) = (poisoned::<bf16>(gpu, &[tq, heads, d]), poisoned::<f32>(gpu, &[heads, tq]));
    attention::attention_varlen(gpu, &dq, &dk, &dv, &seqs, &mut o, &mut lse, opt).unwrap();
    let at = testing::packed_seqs(q_lens, k_lens);
    let want = reference::attention(&wide(&q), &wide(&k), &wide(&v), &at, [heads, kv_heads, d], 1.0 / (d as f64).sqrt(), opt.causal);
    let ctx = format!("attention_varlen {q_lens:?} / {k_lens:?} d {d} {opt:?} (seed {seed})");
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    assert_attention_close(&o, &lse, |z, h, i| h * tq + at[z].0 + i, want, &ctx);
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn attention_matches_float64() {
    use attention::{Attention, Dims};
    let Some(gpu) = gpu_or_skip("attention_matches_float64") else { return };
    let dims = |batch, sq, sk, heads, kv_heads, d| Dims { batch, sq, sk, heads, kv_heads, d };
    for d in [64, 72, 96, 128] {
        for (sq, sk) in [(1, 1), (17, 17), (1000, 1000), (130, 4099)] {
            attention_case::<bf16>(&gpu, dims(2, sq, sk, 2, 2, d), Attention::default());
            attention_case::<bf16>(&gpu, dims(2, sq, sk, 2, 2, d), Attention::causal());
        }
        attention_case::<f16>(&gpu, dims(1, 333, 257, 3, 1, d), Attention::default());
    }
    attention_case::<bf16>(&gpu, dims(1, 4099, 4099, 2, 1, 64), Attention::causal());
    // Rectangular: 1000 context points + 99 targets over the context; GQA.
    attention_case::<bf16>(&gpu, dims(2, 1099, 1099, 4, 2, 64), Attention::default().keys(1000));
    attention_case::<bf16>(&gpu, dims(1, 1099, 1099, 4, 4, 72), Attention::default().keys(1000));
    attention_case::<f16>(&gpu, dims(1, 200, 300, 8, 2, 128), Attention::causal().scale(0.05));
    let (q_lens, k_lens) = ([17, 1, 0, 1000, 130, 5], [20, 1, 3, 999, 4099, 0]);
    for (d, opt) in [(64, Attention::default()), (72, Attention::causal()), (96, Attention::default()), (128, Attention::causal())] {
        attention_varlen_case(&gpu, &q_lens, &k_lens, [4, 2, d], opt);
    }
    // Argument errors, before anything launches.
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let (q, k) = (t(&[1, 8, 4, 64]), t(&[1, 8, 3, 64]));
    let (mut o, mut lse) = (t(&[1, 8, 4, 64]), gpu.alloc::<f32>(&[1, 4, 8]).unwrap());
    assert!(matches!(attention::attention(&gpu, &q, &k, &k, &mut o, &mut lse, Attention::default()), Err(Error::Shape(_))), "4 heads over 3");
    let (q, k) = (t(&[1, 8, 4, 60]), t(&[1, 8, 4, 60]));
    let mut o = t(&[1, 8, 4, 60]);
    assert!(matches!(attention::attention(&gpu, &q, &k, &k, &mut o, &mut lse, Attention::default()), Err(Error::Shape(_))), "head dim 60");
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn every_hopper_forward_config_matches_float64() {
    use attention::{Attention, Dims};
    let Some(gpu) = gpu_or_skip("every_hopper_forward_config_matches_float64") else { return };
    if !attention::attention_fwd_wgmma_kernel::supported(&gpu) {
        eprintln!("SKIPPED every_hopper_forward_config_matches_float64: {} is not an sm_90 GPU", gpu.name());
        return;
    }
    let dims = |batch, sq, sk, heads, kv_heads, d| Dims { batch, sq, sk, heads, kv_heads, d };
    for (cfg, c) in attention::attention_fwd_wgmma_kernel::CONFIGS.iter().enumerate() {
        // The config's widest head dim, and at 80 the vision encoder's 72.
        let d = match c.get("D").unwrap() {
            80 => 72,
            dp => dp,
        };
        eprintln!("{}", c.name);
        let run = |opt: Attention| opt.config(cfg);
        for (sq, sk) in [(1, 1), (7, 7), (129, 129), (1000, 1000), (130, 4099), (4099, 333)] {
            attention_case::<bf16>(&gpu, dims(2, sq, sk, 2, 2, d), run(Attention::default()));
            attention_case::<bf16>(&gpu, dims(2, sq, sk, 2, 2, d), run(Attention::causal()));
        }
        attention_case::<f16>(&gpu, dims(1, 333, 257, 4, 1, d), run(Attention::default()));
        attention_case::<bf16>(&gpu, dims(2, 1099, 1099, 4, 2, d), run(Attention::default().keys(1000)));
        attention_case::<bf16>(&gpu, dims(1, 1099, 1099, 2, 2, d), run(Attention::causal().keys(7)));
        let (q_lens, k_lens) = ([17, 1, 0, 1000, 130, 5], [20, 1, 3, 999, 4099, 0]);
        attention_varlen_case(&gpu, &q_lens, &k_lens, [4, 2, d], run(Attention::default()));
        attention_varlen_case(&gpu, &q_lens, &k_lens, [4, 2, d], run(Attention::causal()));
    }
}

/// The FP8 forward (quantized by our kernel) against float64 on the
/// dequantized inputs, every config, odd lengths, causal, GQA; its error
/// against float64 on the bf16 inputs is printed (what FP8 costs).
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn fp8_attention_matches_float64() {
    use attention::{Attention, Dims};
    let Some(gpu) = gpu_or_skip("fp8_attention_matches_float64") else { return };
    if !attention::attention_fwd_fp8_kernel::supported(&gpu) {
        eprintln!("SKIPPED fp8_attention_matches_float64: {} is not an sm_90 GPU", gpu.name());
        return;
    }
    let dims = |batch, sq, sk, heads, kv_heads, d| Dims { batch, sq, sk, heads, kv_heads, d };
    for (cfg, c) in attention::attention_fwd_fp8_kernel::CONFIGS.iter().enumerate() {
        let d = c.get("D").unwrap();
        let run = |opt: Attention| opt.config(cfg);
        for (sq, sk) in [(1, 1), (7, 7), (129, 129), (1000, 1000), (130, 4099), (4099, 333)] {
            for opt in [Attention::default(), Attention::causal()] {
                let err = testing::check_attention_fp8(&gpu, dims(2, sq, sk, 2, 2, d), run(opt), 1.0);
                eprintln!("{} {sq}x{sk} {opt:?}: {err:?}", c.name);
            }
        }
        testing::check_attention_fp8(&gpu, dims(1, 333, 1257, 4, 1, d), run(Attention::causal()), 2.0);
        testing::check_attention_fp8(&gpu, dims(3, 257, 1000, 6, 2, d), run(Attention::default().scale(0.05)), 1.0);
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn host_apis_check_their_arguments() {
    let Some(gpu) = gpu_or_skip("host_apis_check_their_arguments") else { return };
    let x = gpu.alloc::<f32>(&[4, 8]).unwrap();
    let mut wrong = gpu.alloc::<f32>(&[4, 9]).unwrap();
    assert!(matches!(softmax::softmax(&gpu, &x, &mut wrong), Err(Error::Shape(_))));
    let flat = gpu.alloc::<f32>(&[32]).unwrap();
    let mut out = gpu.alloc::<f32>(&[32]).unwrap();
    assert!(matches!(softmax::softmax(&gpu, &flat, &mut out), Err(Error::Shape(_))));
    let short = gpu.alloc::<f32>(&[31]).unwrap();
    assert!(matches!(vector::add(&gpu, &flat, &short, &mut out), Err(Error::Shape(_))));
    let w = gpu.alloc::<f32>(&[7]).unwrap();
    let (mut y, mut mean, mut rstd) = (gpu.alloc::<f32>(&[4, 8]).unwrap(), gpu.alloc::<f32>(&[4]).unwrap(), gpu.alloc::<f32>(&[4]).unwrap());
    assert!(matches!(norm::layer_norm(&gpu, &x, &w, None, 1e-5, &mut y, &mut mean, &mut rstd), Err(Error::Shape(_))));
    // An element type the kernel was not built for is an error, not a crash.
    let e = gpu.alloc::<rustile::F8E4M3>(&[16]).unwrap();
    let mut eo = gpu.alloc::<rustile::F8E4M3>(&[16]).unwrap();
    assert!(matches!(vector::add(&gpu, &e, &e, &mut eo), Err(Error::DType(_))));
    // Empty tensors launch nothing.
    let z = gpu.alloc::<f32>(&[0, 8]).unwrap();
    let mut zo = gpu.alloc::<f32>(&[0, 8]).unwrap();
    softmax::softmax(&gpu, &z, &mut zo).unwrap();
}

/// `ops::trimul` on the GPU against float64, elementwise at rtol = atol =
/// 2e-2: whole outputs at small odd sizes with each projection kernel the
/// GPU has (every config of both), and at GPU MODE's seven shapes
/// the rows of 16 pairs (the corners and random ones; the reference at a
/// pair needs one row of left and one of right, not the whole update).
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn trimul_matches_float64() {
    use rustile_ops::trimul::{Dims, Projection, BENCH_SHAPES};
    use testing::{assert_allclose, TriMulCase};
    let Some(gpu) = gpu_or_skip("trimul_matches_float64") else { return };
    // The update with the projection kernel `how`, step by step.
    let run = |case: &TriMulCase, how: Projection| -> Vec<f32> {
        let (tm, x, mask) = case.upload(&gpu).unwrap();
        let Dims { batch, n, dim, .. } = case.dims;
        let mut ws = tm.workspace(&gpu, batch, n).unwrap();
        let mut out = gpu.alloc::<f32>(&[batch, n, n, dim]).unwrap();
        tm.project_with(&gpu, &x, mask.as_ref(), &mut ws, how).unwrap();
        tm.contract(&gpu, &mut ws).unwrap();
        tm.finish(&gpu, &ws, &mut out).unwrap();
        gpu.download(&out).unwrap()
    };
    // Both projection kernels where the GPU has both (wgmma: Hopper).
    let mut kernels = vec![Projection::Mma];
    if Projection::best(&gpu) == Projection::Wgmma {
        kernels.push(Projection::Wgmma);
    }
    for (batch, n, dim, hidden, cauchy_x, masked) in [(2, 33, 128, 128, true, true), (1, 7, 16, 40, false, false), (1, 130, 200, 128, false, true), (1, 9, 600, 128, true, true)] {
        let (mut rng, seed) = rng();
        let case = TriMulCase::new(&mut rng, Dims { batch, n, dim, hidden }, cauchy_x, masked);
        for &how in &kernels {
            let ctx = format!("trimul {:?} {how:?} cauchy={cauchy_x} mask={masked} (seed {seed})", case.dims);
            assert_allclose(&run(&case, how), &case.want(), 2e-2, 2e-2, &ctx);
        }
    }
    // GPU MODE's shapes through `forward` (the faster kernel).
    for s in BENCH_SHAPES {
        let (mut rng, seed) = rng();
        let case = TriMulCase::new(&mut rng, s.dims(), s.cauchy, s.masked);
        let at = case.sample_pairs(&mut rng, 12);
        let (tm, x, mask) = case.upload(&gpu).unwrap();
        let out = gpu.download(&tm.forward(&gpu, &x, mask.as_ref()).unwrap()).unwrap();
        let ctx = format!("trimul {s:?} {:?} at {at:?} (seed {seed})", Projection::best(&gpu));
        assert_allclose(&case.rows_at(&out, &at), &case.want_at(&at), 2e-2, 2e-2, &ctx);
    }
}

/// The delta-rule GPU tests' problems: `(lens, varlen, heads, initial,
/// tiny-to-huge keys)`, fresh random inputs for each (with the seed).
fn delta_rule_cases(short: usize) -> Vec<(testing::DeltaRuleCase, String, u64, rand::rngs::StdRng)> {
    use rand::Rng;
    let cases: [(&[usize], bool, usize, bool, bool); 6] = [
        (&[1, 1], false, 3, false, false),
        (&[short, short], false, 2, true, false),
        (&[65], false, 8, false, false),
        (&[1000, 1000], false, 2, true, true),
        (&[4097], false, 2, true, false),
        (&[1, 7, 63, 65, 1000], true, 3, true, true),
    ];
    let mut out = Vec::new();
    for (lens, varlen, heads, initial, extreme) in cases {
        let (mut rng, seed) = rng();
        let lambda = |rng: &mut rand::rngs::StdRng| if extreme { 10f32.powf(rng.gen_range(-4.0..3.0)) } else { 1.0 };
        let case = testing::DeltaRuleCase::new(&mut rng, lens, varlen, heads, lambda, initial);
        out.push((case, format!("lens {lens:?} varlen={varlen} heads={heads} initial={initial} tiny-to-huge keys={extreme}"), seed, rng));
    }
    out
}

/// `ops::delta_rule` on the GPU against the float64 recurrence, both forms
/// (the chunked one also cut into 3 segments): odd lengths (1 to 4097, none
/// a multiple of the chunk), packed sequences, an initial state, keys of
/// squared norm from 1e-4 to 1e3; then at 65,536 tokens the chunked form
/// (its default segments) against the recurrent one (the float64 reference
/// would take minutes), and no NaN or Inf anywhere.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn delta_rule_matches_float64() {
    use testing::DeltaRuleCase;
    let Some(gpu) = gpu_or_skip("delta_rule_matches_float64") else { return };
    let unit = |_: &mut rand::rngs::StdRng| 1.0f32;
    for (case, what, seed, _) in delta_rule_cases(63) {
        for (recurrent, segments, tol) in [(false, None, [1e-2, 1e-2]), (false, Some(3), [1e-2, 1e-2]), (true, None, [4e-3, 1e-4])] {
            let (o, state) = case.errors(&gpu, recurrent, segments).unwrap();
            let ctx = format!("delta_rule {what} recurrent={recurrent} segments {segments:?} (seed {seed})");
            assert!(o < tol[0] && state < tol[1], "{ctx}: o off by {o:.2e}, final state by {state:.2e} (tolerances {tol:?})");
            eprintln!("{ctx}: o {o:.2e}, state {state:.2e}");
        }
    }
    // Long: the chunked form against the recurrence (both here, on the GPU).
    let (mut rng, seed) = rng();
    let case = DeltaRuleCase::new(&mut rng, &[65536], false, 2, unit, true);
    let ((o, state), (o_rec, state_rec)) = (case.run(&gpu, false, None).unwrap(), case.run(&gpu, true, None).unwrap());
    let finite = o.iter().all(|x| x.to_f32().is_finite()) && state.iter().all(|x| x.is_finite());
    let (eo, es) = (testing::rel_err(&o, &testing::wide(&o_rec)), testing::rel_err(&state, &testing::wide(&state_rec)));
    eprintln!("delta_rule 65536 tokens, chunked against recurrent: o {eo:.2e}, state {es:.2e} (seed {seed})");
    assert!(finite && eo < 1e-2 && es < 1e-2, "delta_rule at 65536 tokens (seed {seed}): finite {finite}, o off by {eo:.2e}, state by {es:.2e}");
}

/// The delta rule's backward against the float64 recurrence's gradients at
/// odd lengths, packed sequences, keys from tiny to huge, with an initial
/// state and a final state's gradient, in one segment and in several; then
/// at 65,536 tokens the default segments against one (the float64
/// reference would keep 2 GB of states a head), and no NaN or Inf.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn delta_rule_backward_matches_float64() {
    use testing::{DeltaRuleCase, DELTA_RULE_GRAD_TOL};
    let Some(gpu) = gpu_or_skip("delta_rule_backward_matches_float64") else { return };
    let unit = |_: &mut rand::rngs::StdRng| 1.0f32;
    for (case, what, seed, mut rng) in delta_rule_cases(7) {
        let out = case.output_grads(&mut rng, case.initial.is_some());
        for segments in [None, Some(3)] {
            let errs = case.grad_errors(&gpu, &out, segments).unwrap();
            let shown = errs.map(|e| format!("{e:.2e}")).join(", ");
            let ctx = format!("delta_rule_backward {what} segments {segments:?} (seed {seed})");
            assert!(errs.iter().zip(DELTA_RULE_GRAD_TOL).all(|(&e, tol)| e < tol), "{ctx}: [dq, dk, dv, dβ, d_initial] off by [{shown}] (tolerances {DELTA_RULE_GRAD_TOL:?})");
            eprintln!("{ctx}: [dq, dk, dv, dβ, d_initial] off by [{shown}]");
        }
    }
    let (mut rng, seed) = rng();
    let case = DeltaRuleCase::new(&mut rng, &[65536], false, 2, unit, true);
    let out = case.output_grads(&mut rng, true);
    let (many, one) = (case.run_backward(&gpu, &out, None).unwrap(), case.run_backward(&gpu, &out, Some(1)).unwrap());
    let finite = many.dqkv.iter().flatten().all(|x| x.to_f32().is_finite()) && many.d_initial.iter().chain(&many.dbeta).all(|x| x.is_finite());
    let errs: Vec<f64> = (0..3).map(|i| testing::rel_err(&many.dqkv[i], &testing::wide(&one.dqkv[i]))).chain([testing::rel_err(&many.dbeta, &testing::wide(&one.dbeta)), testing::rel_err(&many.d_initial, &testing::wide(&one.d_initial))]).collect();
    let shown = errs.iter().map(|e| format!("{e:.2e}")).collect::<Vec<_>>().join(", ");
    eprintln!("delta_rule_backward 65536 tokens, default segments against one: [dq, dk, dv, dβ, d_initial] off by [{shown}] (seed {seed})");
    // dβ relative to itself here (no float64 terms to scale it by): one sum of 65,536 terms a head.
    let tol = [3e-2, 3e-2, 3e-2, 5e-2, 3e-2];
    assert!(finite && errs.iter().zip(tol).all(|(&e, tol)| e < tol), "delta_rule_backward at 65536 tokens (seed {seed}): finite {finite}, off by [{shown}]");
}
