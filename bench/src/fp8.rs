//! The FP8 GEMM's bench: ours (e4m3, per-tensor scales, and without
//! scales) beside cuBLASLt's FP8 GEMM on the same operands and scales, and
//! beside our bf16 GEMM on the same values (the target is FP8 over
//! our own bf16); then a backward pass's mix, e5m2 A by e4m3 B, beside
//! cuBLASLt's.
use crate::cublas::BlasLt;
use crate::gemm::{close, product_rows, sample_rows};
use crate::harness::{measure, MeasureCfg, Row, Stats, RUSTILE};
use rustile::{bf16, Elem, F8E4M3, F8E5M2};
use rustile_host::{Gpu, Result};
use rustile_ops::gemm_fp8::{self, Scale};
use rustile_ops::testing::{cast, normal, rng, wide};
use rustile_ops::{gemm, gemm_fp8::gemm_fp8};

/// `gemm_fp8` at every shape whose K is a multiple of 16: checks against
/// float64 on sampled rows and against cuBLASLt on every element, then
/// (unless `check_only`) times ours, cuBLASLt and our bf16 GEMM.
pub fn bench_fp8(gpu: &Gpu, mcfg: &MeasureCfg, lt: Option<&BlasLt>, shapes: &[[usize; 3]], check_only: bool) -> Result<Vec<Row>> {
    let mut rows = vec![];
    if !gemm_fp8::gemm_fp8_kernel::supported(gpu) {
        eprintln!("gemm_fp8: skipped (the FP8 GEMM needs Hopper, sm_90a)");
        return Ok(rows);
    }
    for &[m, n, k] in shapes.iter().filter(|s| s[2] % 16 == 0) {
        let (mut rng, seed) = rng();
        let shape = [m, n, k];
        let say = |line: String| eprintln!("gemm_fp8 {m}x{n}x{k}: {line} (seed {seed})");
        crate::harness::status(format!("gemm_fp8 {m}x{n}x{k}"));
        // Values of a few units: a tensor quantized with its amax mapped near 448 looks like this.
        let a: Vec<F8E4M3> = normal(&mut rng, m * k, 0.0, 4.0);
        let b: Vec<F8E4M3> = normal(&mut rng, n * k, 0.0, 4.0);
        let (sa, sb) = (0.25f32, 0.125f32);
        let (da, db) = (gpu.upload(&a, &[m, k])?, gpu.upload(&b, &[n, k])?);
        let (dsa, dsb) = (gpu.upload(&[sa], &[1])?, gpu.upload(&[sb], &[1])?);
        let mut c = gpu.alloc::<bf16>(&[m, n])?;
        gpu.fill_bytes(&mut c, 0xFF)?;
        // The same operands without scales: the plain product, whose
        // epilogue is the bare store (a scale, even α alone, takes the fused
        // epilogue's path; bench/RESULTS.md has what that costs). Checked
        // first, so that a profiler's first two FP8 launches are this one
        // and the scaled one (bench/probes/ncu_gemm.sh).
        let plain = |c: &mut _| gemm_fp8(gpu, &da, &db, c, Scale::None, Scale::None, &gemm::Epilogue::new());
        plain(&mut c)?;
        let got = gpu.download(&c)?;
        for r in sample_rows(m, 2) {
            say(close("no scales, sampled rows vs float64", &got[r.start * n..r.end * n], &product_rows(&a, &b, r.clone(), n, k))?);
        }
        gpu.fill_bytes(&mut c, 0xFF)?;
        let run = |c: &mut _| gemm_fp8(gpu, &da, &db, c, Scale::Tensor(&dsa), Scale::Tensor(&dsb), &gemm::Epilogue::new());
        run(&mut c)?;
        let got = gpu.download(&c)?;
        let s = (sa * sb) as f64;
        for r in sample_rows(m, 8) {
            let want: Vec<f64> = product_rows(&a, &b, r.clone(), n, k).iter().map(|x| x * s).collect();
            say(close("sampled rows vs float64", &got[r.start * n..r.end * n], &want)?);
        }
        let mut lt_stats: Option<Stats> = None;
        if let Some(lt) = lt {
            let mut base = gpu.alloc::<bf16>(&[m, n])?;
            gpu.fill_bytes(&mut base, 0xFF)?;
            // A shape cuBLASLt's FP8 GEMM does not take (it says why) skips the baseline only.
            match lt.gemm_fp8_nt(gpu, &da, &db, &mut base, &dsa, &dsb) {
                Err(rustile_host::Error::Shape(why)) => say(format!("cuBLASLt skipped: {why}")),
                run => {
                    run?;
                    say(close("every element vs cuBLASLt", &got, &wide(&gpu.download(&base)?))?);
                    if !check_only {
                        lt_stats = Some(measure(gpu, mcfg, || lt.gemm_fp8_nt(gpu, &da, &db, &mut base, &dsa, &dsb))?);
                    }
                }
            }
        }
        if check_only {
            continue;
        }
        let (flops, bytes) = (2.0 * (m * n * k) as f64, (m * k + n * k) as f64 + 2.0 * (m * n) as f64);
        let row = |imp: &str, stats: Stats, bytes: f64| Row::new("gemm_fp8", &shape, F8E4M3::NAME, imp, stats).flops(flops).bytes(bytes);
        let ours = measure(gpu, mcfg, || run(&mut c))?;
        let unscaled = measure(gpu, mcfg, || plain(&mut c))?;
        // Our bf16 GEMM on the same values (exact in bf16), unscaled: the yardstick.
        let (a16, b16) = (gpu.upload(&cast::<_, bf16>(&a), &[m, k])?, gpu.upload(&cast::<_, bf16>(&b), &[n, k])?);
        let bf16_stats = measure(gpu, mcfg, || gemm::gemm_nt(gpu, &a16, &b16, &mut c))?;
        say(format!(
            "fp8 / bf16 speed-up {:.2}× with per-tensor scales, {:.2}× without",
            bf16_stats.median_ms / ours.median_ms,
            bf16_stats.median_ms / unscaled.median_ms
        ));
        rows.push(row(RUSTILE, ours, bytes));
        rows.push(row(&format!("{RUSTILE} no scales"), unscaled, bytes));
        rows.push(row(&format!("{RUSTILE} bf16 (same values)"), bf16_stats, 2.0 * (m * k + n * k + m * n) as f64));
        rows.extend(lt_stats.map(|s| row("cublaslt fp8", s, bytes)));
        rows.extend(bench_mixed(gpu, mcfg, lt, shape, (&b, &db), ([&dsa, &dsb], s), check_only, &say)?);
    }
    Ok(rows)
}

/// e5m2 `a` (a gradient) by the e4m3 `b` (weights), per-tensor scales (on
/// the device, and their product `s`):
/// ours checked on sampled rows against float64 and on every element
/// against cuBLASLt, then both timed.
#[allow(clippy::too_many_arguments)]
fn bench_mixed(
    gpu: &Gpu, mcfg: &MeasureCfg, lt: Option<&BlasLt>, [m, n, k]: [usize; 3], (b, db): (&[F8E4M3], &rustile_host::Tensor<F8E4M3>),
    ([dsa, dsb], s): ([&rustile_host::Tensor<f32>; 2], f64), check_only: bool, say: &dyn Fn(String),
) -> Result<Vec<Row>> {
    let (mut rng, _) = rng();
    let a: Vec<F8E5M2> = normal(&mut rng, m * k, 0.0, 4.0);
    let da = gpu.upload(&a, &[m, k])?;
    let mut c = gpu.alloc::<bf16>(&[m, n])?;
    gpu.fill_bytes(&mut c, 0xFF)?;
    let run = |c: &mut _| gemm_fp8(gpu, &da, db, c, Scale::Tensor(dsa), Scale::Tensor(dsb), &gemm::Epilogue::new());
    run(&mut c)?;
    let got = gpu.download(&c)?;
    for r in sample_rows(m, 4) {
        let want: Vec<f64> = product_rows(&a, b, r.clone(), n, k).iter().map(|x| x * s).collect();
        say(close("e5m2 × e4m3, sampled rows vs float64", &got[r.start * n..r.end * n], &want)?);
    }
    let mut lt_stats = None;
    if let Some(lt) = lt {
        let mut base = gpu.alloc::<bf16>(&[m, n])?;
        match lt.gemm_fp8_nt(gpu, &da, db, &mut base, dsa, dsb) {
            Err(rustile_host::Error::Shape(why)) => say(format!("cuBLASLt e5m2 × e4m3 skipped: {why}")),
            r => {
                r?;
                say(close("e5m2 × e4m3, every element vs cuBLASLt", &got, &wide(&gpu.download(&base)?))?);
                if check_only {
                    return Ok(vec![]);
                }
                lt_stats = Some(measure(gpu, mcfg, || lt.gemm_fp8_nt(gpu, &da, db, &mut base, dsa, dsb))?);
            }
        }
    }
    if check_only {
        return Ok(vec![]);
    }
    let (flops, bytes) = (2.0 * (m * n * k) as f64, (m * k + n * k) as f64 + 2.0 * (m * n) as f64);
    let row = |imp: &str, stats: Stats| Row::new("gemm_fp8", &[m, n, k], "e5m2_e4m3", imp, stats).flops(flops).bytes(bytes);
    let mut rows = vec![row(RUSTILE, measure(gpu, mcfg, || run(&mut c))?)];
    rows.extend(lt_stats.map(|s| row("cublaslt fp8", s)));
    Ok(rows)
}
