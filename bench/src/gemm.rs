//! The GEMM family's benches: our kernels beside cuBLAS (through cudarc, on
//! the same stream, in the same process). Every shape gets fresh random
//! inputs, and every result is checked before anything is timed: element by
//! element against the cuBLAS baseline, and on sampled rows against float64.
use crate::cublas::{Blas, BlasLt};
use crate::harness::{measure, measure_each, MeasureCfg, Row, Stats, RUSTILE};
use rustile::{bf16, f16, Elem};
use rustile_host::{Error, Gpu, Result, Tensor};
use rustile_ops::testing::{max_err, normal, rel_err, rng, tolerance, wide};
use rustile_ops::{dual_gemm, gemm, mlp, reference, vector};

/// Named shape lists for `--mnk` (M, N, K of `C[M, N] = A[M, K]·B[N, K]ᵀ`).
pub const SUITES: &[(&str, &[[usize; 3]])] = &[
    ("square", &[[1024, 1024, 1024], [2048, 2048, 2048], [4096, 4096, 4096], [8192, 8192, 8192]]),
    // 8192 tokens through a 4096-wide model's MLP up projection and attention projection.
    ("llm", &[[8192, 11008, 4096], [8192, 4096, 4096]]),
    // Decode-like batches.
    ("skinny", &[[16, 4096, 4096], [64, 4096, 4096], [128, 4096, 4096]]),
];

/// Shapes from `--mnk` items: `MxNxK`, or a suite name, or `all` (every suite).
pub fn parse_shapes(items: &[String]) -> std::result::Result<Vec<[usize; 3]>, String> {
    let mut shapes = vec![];
    for item in items {
        if let Some((_, s)) = SUITES.iter().find(|(name, _)| name == item) {
            shapes.extend_from_slice(s);
        } else if item == "all" {
            shapes.extend(SUITES.iter().flat_map(|(_, s)| s.iter().copied()));
        } else {
            let dims: Vec<usize> = item.split('x').map(|d| d.parse().map_err(|_| format!("bad size {d:?} in {item:?}"))).collect::<std::result::Result<_, _>>()?;
            match dims[..] {
                [m, n, k] if m > 0 && n > 0 && k > 0 => shapes.push([m, n, k]),
                _ => return Err(format!("--mnk takes MxNxK with sizes ≥ 1 or a suite ({}, all); got {item:?}", SUITES.iter().map(|s| s.0).collect::<Vec<_>>().join(", "))),
            }
        }
    }
    Ok(shapes)
}

/// `out` against a baseline's output of the same math: close in norm and element by element.
pub fn close<T: Elem>(what: &str, out: &[T], baseline: &[f64]) -> Result<String> {
    let (err, worst) = (rel_err(out, baseline), max_err(out, baseline));
    let line = format!("{what}: rel err {err:.2e}, worst element {worst:.2e} (of |value| + rms)");
    if err > tolerance::<T>() || worst > 4.0 * tolerance::<T>() {
        return Err(Error::Invalid(format!("wrong result: {line}")));
    }
    Ok(line)
}

/// Rows `rows` of `a·bᵀ` in float64 (`a` `[m, k]`, `b` `[n, k]`).
pub(crate) fn product_rows<TA: Elem, TB: Elem>(a: &[TA], b: &[TB], rows: std::ops::Range<usize>, n: usize, k: usize) -> Vec<f64> {
    reference::matmul_nt(&wide(&a[rows.start * k..rows.end * k]), &wide(b), rows.len(), n, k)
}

/// The first and last few rows, where float64 is cheap enough at any size.
pub(crate) fn sample_rows(m: usize, count: usize) -> [std::ops::Range<usize>; 2] {
    let r = m.min(count);
    [0..r, m - r..m]
}

/// The dual GEMM's baseline, `out = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` as two cuBLAS
/// GEMMs into `gate` and `up` (`[m, n]` scratch) and our SwiGLU kernel.
pub fn cublas_swiglu<T: Elem>(gpu: &Gpu, blas: &Blas, a: &Tensor<T>, [b1, b2]: [&Tensor<T>; 2], [gate, up]: [&mut Tensor<T>; 2], out: &mut Tensor<T>) -> Result<()> {
    blas.gemm_nt(a, b1, gate)?;
    blas.gemm_nt(a, b2, up)?;
    vector::swiglu(gpu, gate, up, out)
}

/// Runs a baseline into `out` once, checks `got` (ours) against it element
/// by element, and times it unless `check_only`.
pub(crate) fn baseline<T: Elem>(
    gpu: &Gpu, mcfg: &MeasureCfg, what: &str, got: &[T], out: &mut Tensor<T>, check_only: bool,
    mut run: impl FnMut(&mut Tensor<T>) -> Result<()>,
) -> Result<(String, Option<Stats>)> {
    run(out)?;
    let line = close(&format!("every element vs {what}"), got, &wide(&gpu.download(out)?))?;
    let stats = if check_only { None } else { Some(measure(gpu, mcfg, || run(out))?) };
    Ok((line, stats))
}

/// cuBLASLt's fastest *correct* listed config for this bf16 shape, measured:
/// on Hopper, cuBLAS's own `mma.sync` kernels (see
/// [`BlasLt::listed_bf16_configs`]), the fair baseline of our `mma.sync`
/// path. Every config is timed briefly (3 calls each, L2 flushed); then,
/// fastest first, each is checked against our product `got` until one
/// agrees. Returns the check's line and (row name, time), or no row when no
/// listed config agrees.
#[allow(clippy::type_complexity)]
fn listed_lt_best<T: Elem>(
    gpu: &Gpu, mcfg: &MeasureCfg, lt: &BlasLt, shape: [usize; 3], (da, db): (&Tensor<T>, &Tensor<T>), got: &[T], out: &mut Tensor<T>,
) -> Result<(String, Option<(String, Stats)>)> {
    let configs = lt.listed_bf16_configs(gpu, shape)?;
    let quick = MeasureCfg { warmup: 1, warmup_ms: 0.0, reps: 3, flush_l2: true };
    let trial = measure_each(gpu, &quick, configs.len(), |i| lt.gemm_bf16_nt_with(gpu, &configs[i], da, db, out))?;
    let mut order: Vec<usize> = (0..configs.len()).collect();
    order.sort_by(|&i, &j| trial[i].median_ms.total_cmp(&trial[j].median_ms));
    for (wrong, &i) in order.iter().enumerate() {
        let c = configs[i];
        let what = format!("cuBLASLt algo {} tile {} stages {} (of {} listed configs, {wrong} faster ones wrong)", c.id, c.tile, c.stages, configs.len());
        // A wrong product is `Invalid`: try the next config.
        match baseline(gpu, mcfg, &what, got, out, false, |out| lt.gemm_bf16_nt_with(gpu, &c, da, db, out)) {
            Ok((line, stats)) => return Ok((line, stats.map(|s| ("cublaslt mma.sync".to_string(), s)))),
            Err(Error::Invalid(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok((format!("cuBLASLt: none of its {} listed bf16 configs agrees with our product; no row", configs.len()), None))
}

/// The product written in f32 (beside cuBLAS writing f32) and in e4m3 with
/// an output scale and the amax (beside nothing: cuBLAS has no bf16 → FP8
/// GEMM), each checked on sampled rows first: `(implementation, time,
/// bytes an output element)`.
#[allow(clippy::type_complexity)]
fn bench_cast<T: Elem>(
    gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, (a, b): (&[T], &[T]), (da, db): (&Tensor<T>, &Tensor<T>), [m, n, k]: [usize; 3],
) -> Result<Vec<(String, Stats, f64)>> {
    use gemm::{Cast, Epilogue, Transpose};
    let say = |line: String| eprintln!("gemm {m}x{n}x{k}: {line}");
    let mut out = vec![];
    let mut c32 = gpu.alloc::<f32>(&[m, n])?;
    gpu.fill_bytes(&mut c32, 0xFF)?;
    gemm::gemm_cast(gpu, da, db.t(), &mut c32, &Epilogue::new(), Cast::default())?;
    let got = gpu.download(&c32)?;
    // An f32 output shows the accumulation's own error, not a rounding to
    // bf16: compared at 1e-4 of the rms, not `close`'s f32 tolerance.
    for r in sample_rows(m, 4) {
        let err = rel_err(&got[r.start * n..r.end * n], &product_rows(a, b, r.clone(), n, k));
        if err > 1e-4 {
            return Err(Error::Invalid(format!("wrong f32 output: rows {r:?} rel err {err:.2e}")));
        }
        say(format!("→ f32, sampled rows vs float64: rel err {err:.2e}"));
    }
    if let Some(blas) = blas {
        let mut base = gpu.alloc::<f32>(&[m, n])?;
        blas.gemm_nt(da, db, &mut base)?;
        let err = rel_err(&got, &wide(&gpu.download(&base)?));
        if err > 1e-4 {
            return Err(Error::Invalid(format!("f32 output differs from cuBLAS's: rel err {err:.2e}")));
        }
        say(format!("→ f32, every element vs cuBLAS f32: rel err {err:.2e}"));
        out.push(("cublas →f32".into(), measure(gpu, mcfg, || blas.gemm_nt(da, db, &mut base))?, 4.0));
    }
    out.push((format!("{RUSTILE} →f32"), measure(gpu, mcfg, || gemm::gemm_cast(gpu, da, db.t(), &mut c32, &Epilogue::new(), Cast::default()))?, 4.0));
    if T::KIND != rustile::Kind::Bf16 {
        return Ok(out);
    }
    // e4m3 at the scale that maps the largest value to 448, as delayed scaling would.
    let top = got.iter().fold(0.0f32, |t, v| t.max(v.abs()));
    let scale = gpu.upload(&[448.0 / top], &[1])?;
    let mut amax = gpu.upload(&[0.0f32], &[1])?;
    let mut c8 = gpu.alloc::<rustile::F8E4M3>(&[m, n])?;
    gemm::gemm_cast(gpu, da, db.t(), &mut c8, &Epilogue::new(), Cast { scale: Some(&scale), amax: Some(&mut amax) })?;
    let got_amax = gpu.download(&amax)?[0];
    if (got_amax - top).abs() > 1e-5 * top {
        return Err(Error::Invalid(format!("e4m3 output's amax {got_amax}, the f32 output's largest |value| {top}")));
    }
    let got8 = gpu.download(&c8)?;
    let want: Vec<f64> = got.iter().map(|&v| (v * 448.0 / top) as f64).collect();
    let err = rel_err(&got8, &want);
    if err > 0.05 {
        return Err(Error::Invalid(format!("wrong e4m3 output: rel err {err:.2e} against the f32 output scaled")));
    }
    say(format!("→ e4m3, every element vs the f32 output scaled: rel err {err:.2e}; amax {got_amax} matches"));
    let stats = measure(gpu, mcfg, || gemm::gemm_cast(gpu, da, db.t(), &mut c8, &Epilogue::new(), Cast { scale: Some(&scale), amax: Some(&mut amax) }))?;
    out.push((format!("{RUSTILE} →e4m3+amax"), stats, 1.0));
    Ok(out)
}

/// A GEMM-family op at its shapes (`mlp` at `MLP_SHAPES`, `grouped` at
/// `grouped::HEADS_SHAPES`, the others at
/// `shapes`), for the element type named `dtype`.
#[allow(clippy::too_many_arguments)]
pub fn bench_family(
    gpu: &Gpu, mcfg: &MeasureCfg, (blas, lt): (Option<&Blas>, Option<&BlasLt>), op: &str, dtype: &str, shapes: &[[usize; 3]], sweep: bool, check_only: bool,
) -> Result<Vec<Row>> {
    #[allow(clippy::too_many_arguments)]
    fn typed<T: Elem>(
        gpu: &Gpu, mcfg: &MeasureCfg, (blas, lt): (Option<&Blas>, Option<&BlasLt>), op: &str, shapes: &[[usize; 3]], sweep: bool, check_only: bool,
    ) -> Result<Vec<Row>> {
        if !matches!(T::KIND, rustile::Kind::Bf16 | rustile::Kind::F16) {
            eprintln!("{op}: skipped for {} (bf16 and f16 only)", T::NAME);
            return Ok(vec![]);
        }
        if op == "mlp" {
            bench_mlp::<T>(gpu, mcfg, blas, check_only)
        } else if op == "grouped" {
            let mut rows = crate::grouped::bench_heads::<T>(gpu, mcfg, blas, check_only)?;
            rows.extend(crate::grouped::bench_groups::<T>(gpu, mcfg, blas, check_only)?);
            Ok(rows)
        } else {
            bench::<T>(gpu, mcfg, (blas, lt), op, shapes, sweep, check_only)
        }
    }
    match dtype {
        "bf16" => typed::<bf16>(gpu, mcfg, (blas, lt), op, shapes, sweep, check_only),
        "f16" => typed::<f16>(gpu, mcfg, (blas, lt), op, shapes, sweep, check_only),
        _ => typed::<f32>(gpu, mcfg, (blas, lt), op, shapes, sweep, check_only),
    }
}

/// `op` (`gemm` or `dual_gemm`) at every shape: checks, then (unless
/// `check_only`) times ours, cuBLAS, and with `sweep` every config.
fn bench<T: Elem>(
    gpu: &Gpu, mcfg: &MeasureCfg, (blas, lt): (Option<&Blas>, Option<&BlasLt>), op: &str, shapes: &[[usize; 3]], sweep: bool, check_only: bool,
) -> Result<Vec<Row>> {
    let mut rows = vec![];
    for &[m, n, k] in shapes {
        let (mut rng, seed) = rng();
        let shape = [m, n, k];
        let size = std::mem::size_of::<T>() as f64;
        let say = |line: String| eprintln!("{op} {m}x{n}x{k}: {line} (seed {seed})");
        crate::harness::status(format!("{op} {m}x{n}x{k}"));
        let a: Vec<T> = normal(&mut rng, m * k, 0.0, 1.0);
        let b: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
        let (da, db) = (gpu.upload(&a, &[m, k])?, gpu.upload(&b, &[n, k])?);
        let mut c = gpu.alloc::<T>(&[m, n])?;
        let mut base = gpu.alloc::<T>(&[m, n])?;
        gpu.fill_bytes(&mut c, 0xFF)?;
        gpu.fill_bytes(&mut base, 0xFF)?;
        let row = |imp: &str, stats: Stats, flops: f64, bytes: f64| Row::new(op, &shape, T::NAME, imp, stats).flops(flops).bytes(bytes);
        match op {
            "gemm" => {
                let (flops, bytes) = (2.0 * (m * n * k) as f64, (m * k + n * k + m * n) as f64 * size);
                gemm::gemm_nt(gpu, &da, &db, &mut c)?;
                let got = gpu.download(&c)?;
                for r in sample_rows(m, 8) {
                    say(close("sampled rows vs float64", &got[r.start * n..r.end * n], &product_rows(&a, &b, r.clone(), n, k))?);
                }
                let mut cublas = None;
                if let Some(blas) = blas {
                    let (line, stats) = baseline(gpu, mcfg, "cuBLAS", &got, &mut base, check_only, |out| blas.gemm_nt(&da, &db, out))?;
                    say(line);
                    cublas = stats;
                }
                // What the standard fused epilogue costs: a linear layer's bias, SiLU and a
                // residual, in the same kernel (cuBLAS does the plain product only).
                let bias: Vec<T> = normal(&mut rng, n, 0.0, 1.0);
                let res: Vec<T> = normal(&mut rng, m * n, 0.0, 1.0);
                let (dbias, dres) = (gpu.upload(&bias, &[n])?, gpu.upload(&res, &[m, n])?);
                let epi = gemm::Epilogue::new().bias_per_column(&dbias).act(gemm::Act::Silu).residual(&dres);
                let e = epi.epi();
                let check_fused = |what: &str, fused: &[T]| -> Result<()> {
                    for r in sample_rows(m, 8) {
                        let ab = product_rows(&a, &b, r.clone(), n, k);
                        let want: Vec<f64> = (0..ab.len())
                            .map(|i| reference::epilogue(&e, ab[i], bias[i % n].to_f32() as f64, res[r.start * n + i].to_f32() as f64, 0.0))
                            .collect();
                        say(close(&format!("{what}, sampled rows vs float64"), &fused[r.start * n..r.end * n], &want)?);
                    }
                    Ok(())
                };
                gemm::gemm_nt_fused(gpu, &da, &db, &mut c, &epi)?;
                check_fused("fused bias+silu+residual", &gpu.download(&c)?)?;
                if check_only {
                    continue;
                }
                rows.push(row(RUSTILE, measure(gpu, mcfg, || gemm::gemm_nt(gpu, &da, &db, &mut c))?, flops, bytes));
                rows.extend(cublas.map(|stats| row("cublas", stats, flops, bytes)));
                let plan = gemm::Plan::nt(m, n, k);
                let mma = gemm::Config::Mma(gemm::mma_config(gpu, &plan));
                if gemm::choose(gpu, &plan) != mma {
                    // The sm_80 path on this GPU too, for comparison.
                    let stats = measure(gpu, mcfg, || gemm::gemm_nt_with_config(gpu, mma, &da, &db, &mut c, &gemm::Epilogue::new()))?;
                    rows.push(row(&format!("{RUSTILE} mma.sync"), stats, flops, bytes));
                    gemm::gemm_nt_with_config(gpu, mma, &da, &db, &mut c, &epi)?;
                    check_fused("mma.sync fused bias+silu+residual", &gpu.download(&c)?)?;
                    let stats = measure(gpu, mcfg, || gemm::gemm_nt_with_config(gpu, mma, &da, &db, &mut c, &epi))?;
                    rows.push(row(&format!("{RUSTILE} mma.sync +bias+silu+residual"), stats, flops, bytes + (n + m * n) as f64 * size));
                    if let (Some(lt), rustile::Kind::Bf16) = (lt, T::KIND) {
                        let (line, best) = listed_lt_best(gpu, mcfg, lt, [m, n, k], (&da, &db), &got, &mut base)?;
                        say(line);
                        rows.extend(best.map(|(imp, stats)| row(&imp, stats, flops, bytes)));
                    }
                }
                let stats = measure(gpu, mcfg, || gemm::gemm_nt_fused(gpu, &da, &db, &mut c, &epi))?;
                rows.push(row(&format!("{RUSTILE} +bias+silu+residual"), stats, flops, bytes + (n + m * n) as f64 * size));
                if gemm::gemm_tma_kernel::supported(gpu) && plan.tma_ready() {
                    rows.extend(bench_cast(gpu, mcfg, blas, (&a, &b), (&da, &db), [m, n, k])?.into_iter().map(|(imp, stats, out)| {
                        row(&imp, stats, flops, bytes + (out - size) * (m * n) as f64)
                    }));
                }
                if sweep {
                    let mma = gemm::gemm_nt_kernel::CONFIGS.iter().enumerate().map(|(i, cf)| (gemm::Config::Mma(i), cf.name));
                    let wgmma = gemm::gemm_wgmma_kernel::CONFIGS.iter().enumerate().map(|(i, cf)| (gemm::Config::Wgmma(i), cf.name));
                    let tma = gemm::gemm_tma_kernel::CONFIGS.iter().enumerate().map(|(i, cf)| (gemm::Config::Tma(i), cf.name));
                    let hopper: Vec<_> = if gemm::gemm_wgmma_kernel::supported(gpu) { wgmma.chain(tma).collect() } else { vec![] };
                    for (cfg, name) in mma.chain(hopper) {
                        crate::harness::status(format!("{op} {m}x{n}x{k}: config {name}"));
                        let stats = measure(gpu, mcfg, || gemm::gemm_nt_with_config(gpu, cfg, &da, &db, &mut c, &gemm::Epilogue::new()))?;
                        let path = match cfg {
                            gemm::Config::Mma(_) => "mma.sync",
                            gemm::Config::Wgmma(_) => "wgmma",
                            gemm::Config::Tma(_) => "tma+wgmma",
                        };
                        rows.push(row(&format!("{RUSTILE} {path} cfg={name}"), stats, flops, bytes));
                    }
                }
            }
            "dual_gemm" => {
                let (flops, bytes) = (4.0 * (m * n * k) as f64, (m * k + 2 * n * k + m * n) as f64 * size);
                let b2: Vec<T> = normal(&mut rng, n * k, 0.0, 1.0);
                let db2 = gpu.upload(&b2, &[n, k])?;
                dual_gemm::dual_gemm(gpu, &da, &db, &db2, &mut c)?;
                let got = gpu.download(&c)?;
                for r in sample_rows(m, 4) {
                    let want = reference::swiglu(&product_rows(&a, &b, r.clone(), n, k), &product_rows(&a, &b2, r.clone(), n, k));
                    say(close("sampled rows vs float64", &got[r.start * n..r.end * n], &want)?);
                }
                let mut two = None;
                if let Some(blas) = blas {
                    let (mut gate, mut up) = (gpu.alloc::<T>(&[m, n])?, gpu.alloc::<T>(&[m, n])?);
                    let (line, stats) = baseline(gpu, mcfg, "cuBLAS×2 + swiglu", &got, &mut base, check_only, |out| {
                        cublas_swiglu(gpu, blas, &da, [&db, &db2], [&mut gate, &mut up], out)
                    })?;
                    say(line);
                    two = stats;
                }
                if check_only {
                    continue;
                }
                rows.push(row(RUSTILE, measure(gpu, mcfg, || dual_gemm::dual_gemm(gpu, &da, &db, &db2, &mut c))?, flops, bytes));
                let hopper = dual_gemm::dual_gemm_tma_kernel::supported(gpu);
                if hopper {
                    // The sm_80 kernel on this GPU too, for comparison.
                    let mma = dual_gemm::choose_mma(gpu, m, n, k);
                    let stats = measure(gpu, mcfg, || dual_gemm::dual_gemm_with_config(gpu, mma, &da, &db, &db2, &mut c))?;
                    rows.push(row(&format!("{RUSTILE} mma.sync"), stats, flops, bytes));
                }
                if let Some(stats) = two {
                    // Its bytes include the two [m, n] intermediates written and read back.
                    rows.push(row("cublas×2+swiglu", stats, flops, bytes + 4.0 * (m * n) as f64 * size));
                }
                if sweep {
                    let mma = dual_gemm::dual_gemm_kernel::CONFIGS.iter().enumerate().map(|(i, cf)| (gemm::Config::Mma(i), "mma.sync", cf.name));
                    let tma = dual_gemm::dual_gemm_tma_kernel::CONFIGS.iter().enumerate().map(|(i, cf)| (gemm::Config::Tma(i), "tma+wgmma", cf.name));
                    for (cfg, path, name) in mma.chain(tma.filter(|_| hopper)) {
                        crate::harness::status(format!("{op} {m}x{n}x{k}: config {name}"));
                        let stats = measure(gpu, mcfg, || dual_gemm::dual_gemm_with_config(gpu, cfg, &da, &db, &db2, &mut c))?;
                        rows.push(row(&format!("{RUSTILE} {path} cfg={name}"), stats, flops, bytes));
                    }
                }
            }
            _ => unreachable!("not a GEMM-family op: {op}"),
        }
    }
    Ok(rows)
}

/// The MLP shapes of issue 3: (rows, d_model, d_ff), 16k to 200k rows of 512 → 1365.
pub const MLP_SHAPES: &[[usize; 3]] = &[[16384, 512, 1365], [65536, 512, 1365], [200_000, 512, 1365]];

/// The gated (SwiGLU) MLP at `MLP_SHAPES` beside cuBLAS gate, up and down
/// GEMMs plus our SwiGLU kernel; checked like `bench` (the baseline rounds
/// the gate and up projections, so the element check against it is looser
/// than against float64 but still catches a wrong block).
fn bench_mlp<T: Elem>(gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, check_only: bool) -> Result<Vec<Row>> {
    let mut rows = vec![];
    for &[n_rows, d_model, d_ff] in MLP_SHAPES {
        let (mut rng, seed) = rng();
        let say = |line: String| eprintln!("mlp {n_rows}x{d_model}x{d_ff}: {line} (seed {seed})");
        crate::harness::status(format!("mlp {n_rows}x{d_model}x{d_ff}"));
        let size = std::mem::size_of::<T>() as f64;
        let x: Vec<T> = normal(&mut rng, n_rows * d_model, 0.0, 1.0);
        let w: Vec<Vec<T>> = (0..2).map(|_| normal(&mut rng, d_ff * d_model, 0.0, 1.0 / (d_model as f32).sqrt())).collect();
        let w2: Vec<T> = normal(&mut rng, d_model * d_ff, 0.0, 1.0 / (d_ff as f32).sqrt());
        let dx = gpu.upload(&x, &[n_rows, d_model])?;
        let (dg, du, dw2) = (gpu.upload(&w[0], &[d_ff, d_model])?, gpu.upload(&w[1], &[d_ff, d_model])?, gpu.upload(&w2, &[d_model, d_ff])?);
        let mut y = gpu.alloc::<T>(&[n_rows, d_model])?;
        gpu.fill_bytes(&mut y, 0xFF)?;
        mlp::gated_mlp(gpu, &dx, &dg, &du, &dw2, &mut y)?;
        let got = gpu.download(&y)?;
        for r in sample_rows(n_rows, 4) {
            let hidden = reference::swiglu(&product_rows(&x, &w[0], r.clone(), d_ff, d_model), &product_rows(&x, &w[1], r.clone(), d_ff, d_model));
            let hidden: Vec<f64> = hidden.iter().map(|&h| T::from_f32(h as f32).to_f32() as f64).collect();
            let want = reference::matmul_nt(&hidden, &wide(&w2), r.len(), d_model, d_ff);
            say(close("sampled rows vs float64", &got[r.start * d_model..r.end * d_model], &want)?);
        }
        let flops = 6.0 * (n_rows * d_model * d_ff) as f64;
        let bytes = (2 * n_rows * d_model + 3 * d_model * d_ff) as f64 * size;
        let shape = [n_rows, d_model, d_ff];
        let mut base_stats = None;
        if let Some(blas) = blas {
            // cuBLAS on the same padded hidden width: its aligned kernels (at 1365 it ran unaligned ones at 83-95 TFLOP/s).
            let (w_in, w2p) = mlp::padded_weights(gpu, &[&dg, &du], &dw2)?;
            let d_ffp = w2p.shape()[1];
            let (mut gate, mut up, mut hidden) = (gpu.alloc::<T>(&[n_rows, d_ffp])?, gpu.alloc::<T>(&[n_rows, d_ffp])?, gpu.alloc::<T>(&[n_rows, d_ffp])?);
            let mut base = gpu.alloc::<T>(&[n_rows, d_model])?;
            let (line, stats) = baseline(gpu, mcfg, "cuBLAS×3 + swiglu", &got, &mut base, check_only, |out| {
                cublas_swiglu(gpu, blas, &dx, [&w_in[0], &w_in[1]], [&mut gate, &mut up], &mut hidden)?;
                blas.gemm_nt(&hidden, &w2p, out)
            })?;
            say(line);
            base_stats = stats;
        }
        if check_only {
            continue;
        }
        let row = |imp: &str, stats: Stats| Row::new("mlp", &shape, T::NAME, imp, stats).flops(flops).bytes(bytes);
        rows.push(row(RUSTILE, measure(gpu, mcfg, || mlp::gated_mlp(gpu, &dx, &dg, &du, &dw2, &mut y))?));
        if let Some(stats) = base_stats {
            rows.push(row("cublas×3+swiglu", stats));
        }
        rows.extend(bench_plain_mlp(gpu, mcfg, blas, [&dx, &dg, &dw2], &mut y, shape)?);
    }
    Ok(rows)
}

/// The plain MLP `silu(x·w1ᵀ)·w2ᵀ` (the TransformerNP's) at one of
/// `MLP_SHAPES`: the op; each of its two GEMMs alone on the padded hidden
/// width (what a kernel streaming the hidden on chip would have to beat:
/// the two GEMMs' main loops without the hidden's store and reload, so at
/// best their rate at a compute-bound shape, `--ops gemm --mnk 8192x8192x8192`);
/// and cuBLAS's two GEMMs around our SiLU kernel on the same padded weights.
/// `y` holds the gated MLP's output and is overwritten.
fn bench_plain_mlp<T: Elem>(
    gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, [x, w1, w2]: [&Tensor<T>; 3], y: &mut Tensor<T>, [n_rows, d_model, d_ff]: [usize; 3],
) -> Result<Vec<Row>> {
    let (w_in, w2p) = mlp::padded_weights(gpu, &[w1], w2)?;
    let (w1p, d_ffp) = (&w_in[0], w2p.shape()[1]);
    let (mut pre, mut hidden) = (gpu.alloc::<T>(&[n_rows, d_ffp])?, gpu.alloc::<T>(&[n_rows, d_ffp])?);
    let silu = gemm::Epilogue::new().act(gemm::Act::Silu);

    mlp::mlp(gpu, x, w1, gemm::Act::Silu, w2, y)?;
    let got = gpu.download(y)?;
    let (xs, w1s, w2s) = (gpu.download(x)?, gpu.download(w1)?, gpu.download(w2)?);
    for r in sample_rows(n_rows, 4) {
        let pre_rows = product_rows(&xs, &w1s, r.clone(), d_ff, d_model);
        let act = gemm::Epi { act: gemm::Act::Silu, ..gemm::Epi::NONE };
        let hid: Vec<f64> = pre_rows.iter().map(|&p| T::from_f32(reference::epilogue(&act, p, 0.0, 0.0, 0.0) as f32).to_f32() as f64).collect();
        let want = reference::matmul_nt(&hid, &wide(&w2s), r.len(), d_model, d_ff);
        eprintln!("mlp (SiLU) {n_rows}x{d_model}x{d_ff}: {}", close("sampled rows vs float64", &got[r.start * d_model..r.end * d_model], &want)?);
    }
    let shape = [n_rows, d_model, d_ff];
    let gemm_flops = 2.0 * (n_rows * d_model * d_ffp) as f64;
    let size = std::mem::size_of::<T>() as f64;
    let named = |op: &str, imp: &str, flops: f64, bytes: usize, stats: Stats| Row::new(op, &shape, T::NAME, imp, stats).flops(flops).bytes(bytes as f64 * size);
    let mut rows = vec![named("mlp_silu", RUSTILE, 2.0 * gemm_flops, 2 * n_rows * d_model + 2 * d_model * d_ff, measure(gpu, mcfg, || mlp::mlp(gpu, x, w1, gemm::Act::Silu, w2, y))?)];
    let first = measure(gpu, mcfg, || gemm::gemm_nt_fused(gpu, x, w1p, &mut hidden, &silu))?;
    rows.push(named("mlp_silu first GEMM", RUSTILE, gemm_flops, n_rows * (d_model + d_ffp) + d_model * d_ffp, first));
    let second = measure(gpu, mcfg, || gemm::gemm_nt(gpu, &hidden, &w2p, y))?;
    rows.push(named("mlp_silu second GEMM", RUSTILE, gemm_flops, n_rows * (d_model + d_ffp) + d_model * d_ffp, second));
    if let Some(blas) = blas {
        let mut base = |out: &mut Tensor<T>| -> Result<()> {
            blas.gemm_nt(x, w1p, &mut pre)?;
            vector::silu(gpu, &pre, &mut hidden)?;
            blas.gemm_nt(&hidden, &w2p, out)
        };
        let mut out = gpu.alloc::<T>(&[n_rows, d_model])?;
        base(&mut out)?;
        eprintln!("mlp (SiLU) {n_rows}x{d_model}x{d_ff}: {}", close("every element vs cuBLAS + silu + cuBLAS", &got, &wide(&gpu.download(&out)?))?);
        let stats = measure(gpu, mcfg, || base(&mut out))?;
        rows.push(named("mlp_silu", "cublas×2+silu", 2.0 * gemm_flops, 2 * n_rows * d_model + 2 * d_model * d_ff, stats));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::parse_shapes;

    #[test]
    fn shapes_come_from_sizes_and_suites() {
        let s = |items: &[&str]| parse_shapes(&items.iter().map(|i| i.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&["777x1030x520"]).unwrap(), [[777, 1030, 520]]);
        assert_eq!(s(&["llm", "16x16x16"]).unwrap(), [[8192, 11008, 4096], [8192, 4096, 4096], [16, 16, 16]]);
        assert_eq!(s(&["all"]).unwrap().len(), 9);
        for bad in ["4096x4096", "0x1x1", "axbxc", "squares"] {
            assert!(s(&[bad]).is_err(), "{bad} should be refused");
        }
    }
}
