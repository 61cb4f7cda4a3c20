//! The NVFP4 dual GEMM's bench at GPU MODE's four shapes (L = 1), beside,
//! on the same GPU and run:
//! (a) dequantize all three operands to fp16, then cuBLAS×2 and the SwiGLU
//!     kernel: what a framework does on a GPU without FP4 tensor cores;
//! (b) the same with the operands dequantized ahead of time (only the GEMMs
//!     and the epilogue timed);
//! (c) our 16-bit dual GEMM on those dequantized operands;
//! and two floors: the 16-bit tensor-core peak over the FLOPs, and the FP4
//! bytes over copy bandwidth. Also GPU MODE's own way of timing: 50 calls
//! back to back on inputs that change (here: four sets in turn).
use crate::cublas::Blas;
use crate::gemm::{close, cublas_swiglu};
use crate::harness::{gb_per_s, measure, MeasureCfg, Row, Stats, RUSTILE};
use rustile::{f16, F4E2M1x2, F8E4M3};
use rustile_host::{Gpu, Result, Tensor};
use rustile_ops::dual_gemm::dual_gemm;
use rustile_ops::dual_gemm_nvfp4::{choose, dual_gemm_nvfp4, dual_gemm_nvfp4_with_config, dual_gemm_nvfp4_ws_kernel, gemm_nvfp4, Config};
use rustile_ops::nvfp4::{dequantize, dequantize_cpu, Nvfp4};
use rustile_ops::reference;
use rustile_ops::testing::{gather_rows, nvfp4_gpu_mode, nvfp4_outside_tolerance, rng};

/// GPU MODE's benchmark shapes, (M, N, K).
pub const SHAPES: [[usize; 3]; 4] = [[256, 4096, 7168], [512, 4096, 7168], [256, 3072, 4096], [512, 3072, 7168]];

/// B200's speed of light for the task's geometric mean, as GPU MODE states it (µs).
const B200_SOL_US: f64 = 4.9;

/// One NVFP4 operand on the GPU and, on the host, its values dequantized.
struct Operand {
    values: Tensor<F4E2M1x2>,
    scales: Tensor<F8E4M3>,
    wide: Vec<f64>,
}

impl Operand {
    /// GPU MODE's draw ([`nvfp4_gpu_mode`]), uploaded.
    fn random(gpu: &Gpu, rng: &mut rand::rngs::StdRng, rows: usize, k: usize) -> Result<Operand> {
        let (pairs, scales) = nvfp4_gpu_mode(rng, rows, k);
        let wide = dequantize_cpu(&pairs, &scales, rows, k).into_iter().map(f64::from).collect();
        Ok(Operand { values: gpu.upload(&pairs, &[rows, k / 2])?, scales: gpu.upload(&scales, &[rows, k / 16])?, wide })
    }

    fn nvfp4(&self) -> Nvfp4<'_> {
        Nvfp4 { values: &self.values, scales: &self.scales }
    }
}

/// The rows a large product is checked on, and their float64 values.
struct Sampled {
    rows: [usize; 3],
    want: Vec<f64>,
}

impl Sampled {
    /// `silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` for the first, middle and last rows of `a`
    /// (`single`: `a·b1ᵀ`).
    fn new([a, b1, b2]: &[Operand; 3], [m, n, k]: [usize; 3], single: bool) -> Sampled {
        let rows = [0, m / 2, m - 1];
        let ga = gather_rows(&a.wide, &rows, k);
        let gate = reference::matmul_nt(&ga, &b1.wide, 3, n, k);
        let want = if single { gate } else { reference::swiglu(&gate, &reference::matmul_nt(&ga, &b2.wide, 3, n, k)) };
        Sampled { rows, want }
    }

    /// The sampled rows of the `[m, n]` output `c`.
    fn of(&self, c: &[f16]) -> Vec<f16> {
        let n = self.want.len() / 3;
        self.rows.iter().flat_map(|&r| c[r * n..(r + 1) * n].iter().copied()).collect()
    }

    /// GPU MODE's check ([`nvfp4_outside_tolerance`]) of `c` on the sampled rows.
    fn check(&self, what: &str, c: &[f16]) -> Result<String> {
        match nvfp4_outside_tolerance(&self.of(c), &self.want) {
            Some((i, g, w)) => Err(rustile_host::Error::Invalid(format!("{what}: sampled element {i}: {g} against {w}, outside rtol = atol = 1e-3"))),
            None => Ok(format!("{what}: 3 sampled rows within rtol = atol = 1e-3 of float64")),
        }
    }

    /// The cuBLAS baseline on the sampled rows: it rounds the gate and up
    /// products to fp16 before the SwiGLU, so it is held to the usual
    /// relative check, and whether it would pass GPU MODE's elementwise one
    /// is said, not required.
    fn check_baseline(&self, c: &[f16]) -> Result<String> {
        let got = self.of(c);
        let line = close("(b) cuBLAS×2 + swiglu, 3 sampled rows vs float64", &got, &self.want)?;
        let gpu_mode = match nvfp4_outside_tolerance(&got, &self.want) {
            None => "passes".to_string(),
            Some((_, g, w)) => format!("fails ({g} against {w}: the fp16 gate and up round before the product)"),
        };
        Ok(format!("{line}; GPU MODE's rtol = atol = 1e-3: {gpu_mode}"))
    }
}

/// The bench: checks ours, (b) and (c) against float64 on sampled rows,
/// then (unless `check_only`) times ours and the baselines at every shape.
pub fn bench_nvfp4(gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, check_only: bool) -> Result<Vec<Row>> {
    let copy_gb_s = crate::harness::copy_bandwidth(gpu, mcfg)?;
    let mut rows = vec![];
    let mut ours_us = vec![];
    for [m, n, k] in SHAPES {
        let (mut rng, seed) = rng();
        let say = |line: String| eprintln!("dual_gemm_nvfp4 {m}x{n}x{k}: {line} (seed {seed})");
        crate::harness::status(format!("dual_gemm_nvfp4 {m}x{n}x{k}: {}", choose(gpu, m, n, k).describe()));
        // Four input sets, for GPU MODE's timing on changing inputs; the first is checked and timed.
        let sets: Vec<[Operand; 3]> = (0..4)
            .map(|_| Ok([Operand::random(gpu, &mut rng, m, k)?, Operand::random(gpu, &mut rng, n, k)?, Operand::random(gpu, &mut rng, n, k)?]))
            .collect::<Result<_>>()?;
        let [a, b1, b2] = &sets[0];
        let mut c = gpu.alloc::<f16>(&[m, n])?;
        gpu.fill_bytes(&mut c, 0xFF)?;
        let ours = |c: &mut Tensor<f16>, [a, b1, b2]: &[Operand; 3]| dual_gemm_nvfp4(gpu, a.nvfp4(), b1.nvfp4(), b2.nvfp4(), c);
        ours(&mut c, &sets[0])?;
        let sampled = Sampled::new(&sets[0], [m, n, k], false);
        say(sampled.check("ours", &gpu.download(&c)?)?);

        // The operands dequantized (exactly) to fp16, for (a), (b) and (c).
        let (mut a16, mut b116, mut b216) = (gpu.alloc::<f16>(&[m, k])?, gpu.alloc::<f16>(&[n, k])?, gpu.alloc::<f16>(&[n, k])?);
        let deq = |a16: &mut Tensor<f16>, b116: &mut Tensor<f16>, b216: &mut Tensor<f16>| -> Result<()> {
            dequantize(gpu, a.nvfp4(), a16)?;
            dequantize(gpu, b1.nvfp4(), b116)?;
            dequantize(gpu, b2.nvfp4(), b216)
        };
        deq(&mut a16, &mut b116, &mut b216)?;
        let mut c16 = gpu.alloc::<f16>(&[m, n])?;
        dual_gemm(gpu, &a16, &b116, &b216, &mut c16)?;
        say(sampled.check("(c) our f16 dual GEMM on the dequantized operands", &gpu.download(&c16)?)?);
        // The single product A·B₁ᵀ (`gemm_nvfp4`) on the same operands.
        gemm_nvfp4(gpu, a.nvfp4(), b1.nvfp4(), &mut c)?;
        say(Sampled::new(&sets[0], [m, n, k], true).check("ours, the single product (gemm_nvfp4)", &gpu.download(&c)?)?);

        if check_only {
            if let Some(blas) = blas {
                let (mut gate, mut up, mut base) = (gpu.alloc::<f16>(&[m, n])?, gpu.alloc::<f16>(&[m, n])?, gpu.alloc::<f16>(&[m, n])?);
                cublas_swiglu(gpu, blas, &a16, [&b116, &b216], [&mut gate, &mut up], &mut base)?;
                say(sampled.check_baseline(&gpu.download(&base)?)?);
            }
            continue;
        }
        let shape = [m, n, k];
        let flops = 4.0 * (m * n * k) as f64;
        let fp4_bytes = ((m + 2 * n) * k) as f64 * (0.5 + 1.0 / 16.0) + 2.0 * (m * n) as f64;
        let row = |imp: &str, stats: Stats| Row::new("dual_gemm_nvfp4", &shape, "e2m1", imp, stats).flops(flops).bytes(fp4_bytes);
        let stats = measure(gpu, mcfg, || ours(&mut c, &sets[0]))?;
        ours_us.push(stats.median_ms * 1e3);
        rows.push(row(RUSTILE, stats));
        // Every other config, beside the tuned table's choice (the row above).
        let default = choose(gpu, m, n, k);
        let mut sweep = vec![format!("{} {:.1}", default.describe(), ours_us.last().unwrap())];
        for cfg in Config::all(gpu).into_iter().filter(|&cfg| cfg != default) {
            crate::harness::status(format!("dual_gemm_nvfp4 {m}x{n}x{k}: {}", cfg.describe()));
            let t = measure(gpu, mcfg, || dual_gemm_nvfp4_with_config(gpu, cfg, a.nvfp4(), b1.nvfp4(), b2.nvfp4(), &mut c))?;
            sweep.push(format!("{} {:.1}", cfg.describe(), t.median_ms * 1e3));
        }
        say(format!("every config, the default first (µs): {}", sweep.join(", ")));
        rows.push(row("rustile f16 dual_gemm, dequantized ahead (c)", measure(gpu, mcfg, || dual_gemm(gpu, &a16, &b116, &b216, &mut c16))?));
        if let Some(blas) = blas {
            let (mut gate, mut up) = (gpu.alloc::<f16>(&[m, n])?, gpu.alloc::<f16>(&[m, n])?);
            let mut base = gpu.alloc::<f16>(&[m, n])?;
            cublas_swiglu(gpu, blas, &a16, [&b116, &b216], [&mut gate, &mut up], &mut base)?;
            say(sampled.check_baseline(&gpu.download(&base)?)?);
            let stats = measure(gpu, mcfg, || {
                deq(&mut a16, &mut b116, &mut b216)?;
                cublas_swiglu(gpu, blas, &a16, [&b116, &b216], [&mut gate, &mut up], &mut base)
            })?;
            rows.push(row("dequantize+cublas×2+swiglu (a)", stats));
            rows.push(row("cublas×2+swiglu, dequantized ahead (b)", measure(gpu, mcfg, || cublas_swiglu(gpu, blas, &a16, [&b116, &b216], [&mut gate, &mut up], &mut base))?));
        }
        // The single product beside cuBLAS on operands dequantized ahead.
        let single_bytes = ((m + n) * k) as f64 * (0.5 + 1.0 / 16.0) + 2.0 * (m * n) as f64;
        let single = |imp: &str, stats: Stats| Row::new("gemm_nvfp4", &shape, "e2m1", imp, stats).flops(flops / 2.0).bytes(single_bytes);
        rows.push(single(RUSTILE, measure(gpu, mcfg, || gemm_nvfp4(gpu, a.nvfp4(), b1.nvfp4(), &mut c))?));
        if let Some(blas) = blas {
            rows.push(single("cublas, dequantized ahead", measure(gpu, mcfg, || blas.gemm_nt(&a16, &b116, &mut c16))?));
        }
        // GPU MODE's timing: 50 calls back to back over changing inputs, one event pair around them.
        for i in 0..5 {
            ours(&mut c, &sets[i % 4])?; // warm-up
        }
        let ms = gpu.time(|| (0..50).try_for_each(|i| ours(&mut c, &sets[i % 4])))?;
        let per_call_us = ms as f64 * 1e3 / 50.0;
        let floor_tc_us = flops / (crate::report::SPEC_PEAK_TFLOP_S * 1e12) * 1e6;
        let floor_bytes_us = fp4_bytes / (copy_gb_s * 1e9) * 1e6;
        say(format!(
            "ours {:.1} µs; GPU MODE's timing (50 calls, 4 input sets) {per_call_us:.1} µs a call; floors: 16-bit tensor cores {floor_tc_us:.1} µs, FP4 bytes at copy bandwidth {floor_bytes_us:.1} µs ({:.0} GB/s achieved)",
            ours_us.last().unwrap(),
            gb_per_s(fp4_bytes, ours_us.last().unwrap() / 1e3)
        ));
    }
    if ours_us.is_empty() {
        return Ok(rows);
    }
    let geomean = ours_us.iter().map(|t| t.ln()).sum::<f64>() / ours_us.len() as f64;
    eprintln!("dual_gemm_nvfp4: geometric mean {:.1} µs over GPU MODE's 4 shapes (B200's speed of light: {B200_SOL_US} µs)", geomean.exp());
    Ok(rows)
}

/// The shapes the tuner times for the NVFP4 dual GEMM: GPU MODE's four
/// benchmark shapes, then (unless `quick`) its test shapes. Shapes whose
/// bucket an earlier one holds are skipped by [`tune`].
pub fn tune_shapes(quick: bool) -> Vec<[usize; 3]> {
    let mut shapes = SHAPES.to_vec();
    if !quick {
        shapes.extend([
            [1536, 512, 7168], [256, 512, 256], [3072, 1024, 1536], [7168, 1024, 256], [7168, 2304, 2048],
            [4608, 384, 7168], [7168, 384, 2304], [512, 768, 7168], [4096, 768, 512],
        ]);
    }
    shapes
}

/// Tunes a warp-specialized NVFP4 kernel (`kernel`): op `dual_gemm_nvfp4`
/// (`dual_gemm_nvfp4_ws_kernel`) or `gemm_nvfp4` (`gemm_nvfp4_ws_kernel`,
/// the product with B₁ alone). Per bucket, every config on fresh GPU MODE
/// operands, checked on sampled rows against float64 with GPU MODE's
/// tolerance, then timed.
pub fn tune(gpu: &Gpu, op: &str, kernel: &str, quick: bool) -> Result<rustile_ops::tune::OpTable> {
    use crate::harness::shape_str;
    use crate::tune::{keep_bucket, measure_cfg, op_table, pruned, report, tune_bucket};
    use rustile_ops::dual_gemm_nvfp4::{gemm_nvfp4_with_config, gemm_nvfp4_ws_kernel, GemmConfig};
    use rustile_ops::tune::bucket_name;
    let single = op == "gemm_nvfp4";
    let configs = if single { gemm_nvfp4_ws_kernel::CONFIGS } else { dual_gemm_nvfp4_ws_kernel::CONFIGS };
    let report = report(&rustile_host::native_arch(gpu.compute_capability()));
    let mcfg = measure_cfg(quick);
    let mut shapes = tune_shapes(quick);
    let mut seen = std::collections::HashSet::new();
    shapes.retain(|s| seen.insert(bucket_name(s)));
    let mut buckets = vec![];
    let bar = crate::harness::progress(shapes.len(), &format!("tune {op}"));
    for (si, &[m, n, k]) in shapes.iter().enumerate() {
        let shape = [m, n, k];
        let (mut rng, _) = rng();
        let operands = [Operand::random(gpu, &mut rng, m, k)?, Operand::random(gpu, &mut rng, n, k)?, Operand::random(gpu, &mut rng, n, k)?];
        let mut p = (Sampled::new(&operands, shape, single), gpu.alloc::<f16>(&[m, n])?);
        let [a, b1, b2] = &operands;
        let run = |c: &mut Tensor<f16>, i: usize| match single {
            true => gemm_nvfp4_with_config(gpu, GemmConfig::Ws(i), a.nvfp4(), b1.nvfp4(), c),
            false => dual_gemm_nvfp4_with_config(gpu, Config::Ws(i), a.nvfp4(), b1.nvfp4(), b2.nvfp4(), c),
        };
        let tag = format!("[{}/{}] {op} {}", si + 1, shapes.len(), shape_str(&shape));
        bar.set_message(format!("{}: checking and timing {} configs", shape_str(&shape), configs.len()));
        let verdict = |(sampled, c): &mut (Sampled, Tensor<f16>), i: usize| {
            pruned(gpu, report.as_ref(), kernel, &configs[i], "f16").or_else(|| {
                let checked = gpu.fill_bytes(c, 0xFF).and_then(|_| run(c, i)).and_then(|_| sampled.check(configs[i].name, &gpu.download(c)?));
                checked.err().map(|e| e.to_string())
            })
        };
        let all: Vec<usize> = (0..configs.len()).collect();
        let tuned = tune_bucket(gpu, &mcfg, &tag, configs, &all, &mut p, verdict, |(_, c), i| run(c, i))?;
        keep_bucket(&mut buckets, op, shape_str(&shape), bucket_name(&shape), tuned);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(op_table(gpu, op, kernel, report, buckets))
}
