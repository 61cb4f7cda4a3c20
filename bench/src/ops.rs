//! Our side of each op's benchmark: fresh random inputs, one correctness
//! check against the float64 reference (on sampled rows, so an 8192×8192
//! check stays cheap), then the timed runs.
use crate::harness::{measure, MeasureCfg, Row, Stats, RUSTILE};
use crate::Sizes;

use rustile::{bf16, f16, Elem};
use rustile_host::{Error, Gpu, Result, Tensor};
use rustile_ops::testing::{normal, rel_err, rng, tolerance, wide};
use rustile_ops::{dual_gemm, gemm, mlp, norm, reference, softmax, vector};

/// `sweep`: also time every config of the op's kernel (rows `rustile cfg=NAME`).
pub fn bench_op(gpu: &Gpu, cfg: &MeasureCfg, op: &str, s: &Sizes, sweep: bool) -> Result<Vec<Row>> {
    match s.dtype.as_str() {
        "f32" => bench_typed::<f32>(gpu, cfg, op, s, sweep),
        "bf16" => bench_typed::<bf16>(gpu, cfg, op, s, sweep),
        _ => bench_typed::<f16>(gpu, cfg, op, s, sweep),
    }
}

/// Times `run(config)` for every config that `fits`, as extra rows named after the config (`op`: for the progress bar).
fn sweep_rows(
    gpu: &Gpu, mcfg: &MeasureCfg, op: &str, configs: &[rustile::KernelConfig], fits: impl Fn(&rustile::KernelConfig) -> bool,
    mut run: impl FnMut(usize) -> Result<()>, row: impl Fn(Stats, String) -> Row,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, c) in configs.iter().enumerate().filter(|(_, c)| fits(c)) {
        crate::harness::status(format!("{op}: config {}", c.name));
        let stats = measure(gpu, mcfg, || run(i))?;
        rows.push(row(stats, format!("{RUSTILE} cfg={}", c.name)));
    }
    Ok(rows)
}

fn bench_typed<T: Elem>(gpu: &Gpu, cfg: &MeasureCfg, op: &str, s: &Sizes, sweep: bool) -> Result<Vec<Row>> {
    let size = std::mem::size_of::<T>() as f64;
    let (mut rng, seed) = rng();
    let (rows, cols, n) = (s.rows, s.cols, s.numel);
    let row = |shape: &[usize], stats: Stats, bytes: f64| Row::new(op, shape, T::NAME, RUSTILE, stats).bytes(bytes);
    let check = |what: &str, err: f64| -> Result<()> {
        eprintln!("{op}: {what} rel err {err:.2e} (seed {seed})");
        if err > tolerance::<T>() {
            return Err(Error::Launch { kernel: op.into(), msg: format!("wrong result: rel err {err:.2e} (seed {seed})") });
        }
        Ok(())
    };
    match op {
        "add" | "swiglu" => {
            let x: Vec<T> = normal(&mut rng, n, 0.0, 1.0);
            let y: Vec<T> = normal(&mut rng, n, 0.0, 1.0);
            let (dx, dy) = (gpu.upload(&x, &[n])?, gpu.upload(&y, &[n])?);
            let mut out = gpu.alloc::<T>(&[n])?;
            let run = |out: &mut Tensor<T>| if op == "add" { vector::add(gpu, &dx, &dy, out) } else { vector::swiglu(gpu, &dx, &dy, out) };
            gpu.fill_bytes(&mut out, 0xFF)?;
            run(&mut out)?;
            let got = gpu.download(&out)?;
            let k = n.min(1 << 20); // the first and last million elements
            for range in [0..k, n - k..n] {
                let want = if op == "add" {
                    reference::add(&wide(&x[range.clone()]), &wide(&y[range.clone()]))
                } else {
                    reference::swiglu(&wide(&x[range.clone()]), &wide(&y[range.clone()]))
                };
                check("sampled", rel_err(&got[range], &want))?;
            }
            let stats = measure(gpu, cfg, || run(&mut out))?;
            let bytes = 3.0 * n as f64 * size;
            let mut rows = vec![row(&[n], stats, bytes)];
            if sweep {
                let k = if op == "add" { vector::add_kernel::CONFIGS } else { vector::swiglu_kernel::CONFIGS };
                rows.extend(sweep_rows(gpu, cfg, op, k, |_| true, |c| {
                    if op == "add" { vector::add_kernel::launch(gpu, c, &dx, &dy, &mut out, n) } else { vector::swiglu_kernel::launch(gpu, c, &dx, &dy, &mut out, n) }
                }, |st, name| Row::new(op, &[n], T::NAME, &name, st).bytes(bytes))?);
            }
            Ok(rows)
        }
        "softmax" | "layernorm" | "rmsnorm" => {
            let x: Vec<T> = normal(&mut rng, rows * cols, 0.0, 1.0);
            let w: Vec<T> = normal(&mut rng, cols, 1.0, 0.5);
            let b: Vec<T> = normal(&mut rng, cols, 0.0, 0.5);
            let (dx, dw, db) = (gpu.upload(&x, &[rows, cols])?, gpu.upload(&w, &[cols])?, gpu.upload(&b, &[cols])?);
            let mut y = gpu.alloc::<T>(&[rows, cols])?;
            let (mut mean, mut rstd) = (gpu.alloc::<f32>(&[rows])?, gpu.alloc::<f32>(&[rows])?);
            let run = |y: &mut Tensor<T>, mean: &mut Tensor<f32>, rstd: &mut Tensor<f32>| match op {
                "softmax" => softmax::softmax(gpu, &dx, y),
                "layernorm" => norm::layer_norm(gpu, &dx, &dw, Some(&db), 1e-5, y, mean, rstd),
                _ => norm::rms_norm(gpu, &dx, &dw, 1e-6, y, rstd),
            };
            gpu.fill_bytes(&mut y, 0xFF)?;
            run(&mut y, &mut mean, &mut rstd)?;
            let got = gpu.download(&y)?;
            let k = rows.min(16); // the first and last 16 rows
            for r in [0..k, rows - k..rows] {
                let span = r.start * cols..r.end * cols;
                let xs = wide(&x[span.clone()]);
                let want = match op {
                    "softmax" => reference::softmax(&xs, cols),
                    "layernorm" => reference::layer_norm(&xs, cols, &wide(&w), Some(&wide(&b)), 1e-5).0,
                    _ => reference::rms_norm(&xs, cols, &wide(&w), 1e-6).0,
                };
                check("sampled rows", rel_err(&got[span], &want))?;
            }
            let stats = measure(gpu, cfg, || run(&mut y, &mut mean, &mut rstd))?;
            let params = if op == "softmax" { 0.0 } else { 2.0 * cols as f64 * size + 8.0 * rows as f64 };
            let bytes = 2.0 * (rows * cols) as f64 * size + params;
            let mut out = vec![row(&[rows, cols], stats, bytes)];
            if sweep {
                // Configs whose tile holds a whole row (the others take two passes by design).
                let fits = |c: &rustile::KernelConfig| c.get("BN").unwrap() >= cols || c.get("BN") == Some(16384);
                let k = match op { "softmax" => softmax::softmax_kernel::CONFIGS, "layernorm" => norm::layer_norm_kernel::CONFIGS, _ => norm::rms_norm_kernel::CONFIGS };
                out.extend(sweep_rows(gpu, cfg, op, k, fits, |c| match op {
                    "softmax" => softmax::softmax_kernel::launch(gpu, c, &dx, &mut y, rows, cols),
                    "layernorm" => norm::layer_norm_kernel::launch(gpu, c, &dx, &dw, &db, &mut y, &mut mean, &mut rstd, rows, cols, 1e-5, 1),
                    _ => norm::rms_norm_kernel::launch(gpu, c, &dx, &dw, &mut y, &mut rstd, rows, cols, 1e-6),
                }, |st, name| Row::new(op, &[rows, cols], T::NAME, &name, st).bytes(bytes))?);
            }
            Ok(out)
        }
        _ => unreachable!("ops are checked in main"),
    }
}

/// Without a GPU: every op in the CPU interpreter at small, odd sizes,
/// checked against float64, so the bench command still proves something.
pub fn cpu_fallback(ops: &[String]) -> bool {
    let (mut rng, seed) = rng();
    let (rows, cols, n) = (67, 1000, 100_003);
    let mut ok = true;
    println!("{:<10} {:>12} {:>6} {:>12} {:>10}", "op", "shape", "dtype", "rel err", "time");
    for op in ops {
        let t0 = std::time::Instant::now();
        let (shape, err) = match op.as_str() {
            "add" | "swiglu" => {
                let x: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
                let y: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
                let (got, want) = if op == "add" {
                    (vector::add_cpu(&x, &y), reference::add(&wide(&x), &wide(&y)))
                } else {
                    (vector::swiglu_cpu(&x, &y), reference::swiglu(&wide(&x), &wide(&y)))
                };
                (format!("{n}"), rel_err(&got, &want))
            }
            "gemm" | "dual_gemm" | "mlp" => {
                let (m, n, k) = (67, 45, 100);
                let a: Vec<bf16> = normal(&mut rng, m * k, 0.0, 1.0);
                let b: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
                let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
                let err = if op == "gemm" {
                    rel_err(&gemm::gemm_nt_cpu(&a, &b, m, n, k), &ab)
                } else if op == "mlp" {
                    // A gated MLP of d_model k, d_ff n on m rows (the hidden rounded to bf16, as stored).
                    let (w_up, w2): (Vec<bf16>, Vec<bf16>) = (normal(&mut rng, n * k, 0.0, 1.0), normal(&mut rng, k * n, 0.0, 1.0));
                    let hidden: Vec<f64> = reference::swiglu(&ab, &reference::matmul_nt(&wide(&a), &wide(&w_up), m, n, k)).iter().map(|&h| bf16::from_f64(h).to_f64()).collect();
                    let want = reference::matmul_nt(&hidden, &wide(&w2), m, k, n);
                    rel_err(&mlp::gated_mlp_cpu(&a, &b, &w_up, &w2, m, k, n), &want)
                } else {
                    let b2: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0);
                    let want = reference::swiglu(&ab, &reference::matmul_nt(&wide(&a), &wide(&b2), m, n, k));
                    rel_err(&dual_gemm::dual_gemm_cpu(&a, &b, &b2, m, n, k), &want)
                };
                (format!("{m}x{n}x{k}"), err)
            }
            "grouped" => {
                // Ten heads of 24 → 91 → 3 sharing one input (GELU-tanh; the hidden rounded to bf16, as stored).
                let dims = [37, 24, 10, 91, 3];
                let [x, w1, b1, w2, b2] = rustile_ops::testing::heads_inputs::<bf16>(&mut rng, dims);
                let round = |v: f64| bf16::from_f64(v).to_f64();
                let want = reference::heads_mlp(&wide(&x), &wide(&w1), &wide(&b1), gemm::Act::GeluTanh, &wide(&w2), &wide(&b2), dims, round);
                let got = rustile_ops::grouped_gemm::heads_mlp_cpu(&x, &w1, &b1, gemm::Act::GeluTanh, &w2, &b2, dims);
                ("37x10x91".into(), rel_err(&got, &want))
            }
            "attention" => {
                // Two sequences of 77 queries over 150 keys, 4 heads over 2 key/value heads of 72, causal.
                let dims = rustile_ops::attention::Dims { batch: 2, sq: 77, sk: 150, heads: 4, kv_heads: 2, d: 72 };
                let q: Vec<bf16> = normal(&mut rng, 2 * 77 * 4 * 72, 0.0, 1.0);
                let k: Vec<bf16> = normal(&mut rng, 2 * 150 * 2 * 72, 0.0, 1.0);
                let v: Vec<bf16> = normal(&mut rng, 2 * 150 * 2 * 72, 0.0, 1.0);
                use rustile_ops::attention::{attention_backward_cpu, attention_cpu, Attention};
                let (o, lse) = attention_cpu(&q, &k, &v, dims, Attention::causal());
                let want = rustile_ops::testing::attention_want(&q, &k, &v, dims, Attention::causal()).0;
                // And the backward: its gradients pass through two 16-bit roundings, so half their error is what counts here.
                let d_o: Vec<bf16> = normal(&mut rng, q.len(), 0.0, 1.0);
                let (dq, dk, dv) = attention_backward_cpu([&q, &k, &v, &o, &d_o], &lse, dims, Attention::causal());
                let seqs: Vec<_> = (0..2).map(|z| (z * 77, 77, z * 150, 150)).collect();
                let grads = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, [4, 2, 72], 1.0 / 72f64.sqrt(), true);
                let grad_err = [dq, dk, dv].iter().zip(&grads).map(|(got, want)| rel_err(got, want)).fold(0.0, f64::max);
                ("2x77x150x4x2x72 fwd+bwd".into(), rel_err(&o, &want).max(grad_err / 2.0))
            }
            "attention_fp8" => {
                // Quantized by our kernel; o against float64 on the dequantized inputs (and panics on a wrong lse or a NaN).
                let dims = rustile_ops::attention::Dims { batch: 1, sq: 77, sk: 150, heads: 4, kv_heads: 2, d: 64 };
                let gpu = rustile_host::Gpu::interpreter();
                let err = rustile_ops::testing::check_attention_fp8(&gpu, dims, rustile_ops::attention::Attention::causal(), 1.0);
                ("1x77x150x4x2x64".into(), err.vs_dequantized)
            }
            "delta_rule" => {
                // The chunked form and its backward over packed sequences of odd lengths, 2 heads, from an
                // initial state, in 2 segments; each gradient's error in units of its tolerance, as o's.
                let case = rustile_ops::testing::DeltaRuleCase::new(&mut rng, &[1, 100, 700], true, 2, |_| 1.0, true);
                let gpu = rustile_host::Gpu::interpreter();
                let (o, _) = case.errors(&gpu, false, Some(2)).unwrap_or_else(|e| panic!("delta_rule: {e}"));
                let out = case.output_grads(&mut rng, true);
                let grads = case.grad_errors(&gpu, &out, Some(2)).unwrap_or_else(|e| panic!("delta_rule backward: {e}"));
                let scaled = grads.iter().zip(rustile_ops::testing::DELTA_RULE_GRAD_TOL).map(|(e, tol)| e / tol * tolerance::<bf16>());
                ("1x801x2x64 fwd+bwd".into(), scaled.fold(o, f64::max))
            }
            "quasar" => {
                // The layer's own kernels: the short convolution with SiLU and the gated RMSNorm.
                let gpu = rustile_host::Gpu::interpreter();
                let (b, t, c) = (2, 33, 136);
                let (x, w): (Vec<bf16>, Vec<bf16>) = (normal(&mut rng, b * t * c, 0.0, 1.0), normal(&mut rng, 4 * c, 0.0, 0.5));
                let (xt, wt) = (gpu.upload(&x, &[b, t, c]).unwrap(), gpu.upload(&w, &[4, c]).unwrap());
                let mut y = gpu.alloc::<bf16>(&[b, t, c]).unwrap();
                rustile_ops::quasar::conv_silu(&gpu, &xt, &wt, &mut y).unwrap_or_else(|e| panic!("quasar: {e}"));
                let conv = rel_err(&gpu.download(&y).unwrap(), &reference::conv_silu(&wide(&x), &wide(&w), t, c));
                let (o, g, nw): (Vec<bf16>, Vec<bf16>, Vec<bf16>) = (normal(&mut rng, t * 128, 0.0, 2.0), normal(&mut rng, t * 128, 0.0, 2.0), normal(&mut rng, 64, 1.0, 0.3));
                let up = |v: &[bf16], s: &[usize]| gpu.upload(v, s).unwrap();
                let (mut yn, mut rstd) = (gpu.alloc::<bf16>(&[t, 128]).unwrap(), gpu.alloc::<f32>(&[2, t]).unwrap());
                rustile_ops::quasar::gated_rms_norm(&gpu, &up(&o, &[t, 128]), &up(&g, &[t, 128]), &up(&nw, &[64]), 1e-5, &mut yn, &mut rstd).unwrap_or_else(|e| panic!("quasar: {e}"));
                let norm = rel_err(&gpu.download(&yn).unwrap(), &reference::gated_rms_norm(&wide(&o), &wide(&g), &wide(&nw), 1e-5));
                (format!("{b}x{t}x{c} conv, {t}x128 norm"), conv.max(norm))
            }
            "trimul" => {
                // N = 24, dim 128, hidden 128, x from Cauchy(0, 2), masked.
                let dims = rustile_ops::trimul::Dims { batch: 1, n: 24, dim: 128, hidden: 128 };
                let case = rustile_ops::testing::TriMulCase::new(&mut rng, dims, true, true);
                let got = rustile_ops::trimul::trimul_cpu(&case.x, case.mask.as_deref(), &case.params(|v| v.as_slice()), dims);
                ("24x1x128".into(), rel_err(&got, &case.want()))
            }
            "dual_gemm_nvfp4" => {
                // Random E2M1 codes and E4M3 scales, in the interpreter; against float64 of the dequantized values.
                let (m, n, k) = (67, 45, 128);
                let gpu = rustile_host::Gpu::interpreter();
                let mut operand = |rows: usize| {
                    let (pairs, scales, wide) = rustile_ops::testing::nvfp4_random(&mut rng, rows, k, true);
                    (gpu.upload(&pairs, &[rows, k / 2]).unwrap(), gpu.upload(&scales, &[rows, k / 16]).unwrap(), wide)
                };
                let (a, b1, b2) = (operand(m), operand(n), operand(n));
                use rustile_ops::{dual_gemm_nvfp4::dual_gemm_nvfp4, nvfp4::Nvfp4};
                let mut c = gpu.alloc::<rustile::f16>(&[m, n]).unwrap();
                let [a4, b14, b24] = [&a, &b1, &b2].map(|x| Nvfp4 { values: &x.0, scales: &x.1 });
                dual_gemm_nvfp4(&gpu, a4, b14, b24, &mut c).unwrap_or_else(|e| panic!("dual_gemm_nvfp4: {e}"));
                let want = reference::swiglu(&reference::matmul_nt(&a.2, &b1.2, m, n, k), &reference::matmul_nt(&a.2, &b2.2, m, n, k));
                (format!("{m}x{n}x{k}"), rel_err(&gpu.download(&c).unwrap(), &want))
            }
            "gemm_fp8" => {
                let (m, n, k) = (67, 45, 96);
                let a: Vec<rustile::F8E4M3> = normal(&mut rng, m * k, 0.0, 2.0);
                let b: Vec<rustile::F8E4M3> = normal(&mut rng, n * k, 0.0, 2.0);
                let cfg = rustile_ops::gemm_fp8::default_config(m, n);
                let got = rustile_ops::gemm_fp8::gemm_fp8_cpu(cfg, &a, &b, [m, n, k], &[], &[], &[], &[], gemm::Epi::NONE);
                (format!("{m}x{n}x{k}"), rel_err(&got, &reference::matmul_nt(&wide(&a), &wide(&b), m, n, k)))
            }
            _ => {
                let x: Vec<bf16> = normal(&mut rng, rows * cols, 0.0, 1.0);
                let w: Vec<bf16> = normal(&mut rng, cols, 1.0, 0.5);
                let err = match op.as_str() {
                    "softmax" => rel_err(&softmax::softmax_cpu(&x, rows, cols), &reference::softmax(&wide(&x), cols)),
                    "layernorm" => rel_err(
                        &norm::layer_norm_cpu(&x, rows, cols, &w, None, 1e-5).0,
                        &reference::layer_norm(&wide(&x), cols, &wide(&w), None, 1e-5).0,
                    ),
                    _ => rel_err(&norm::rms_norm_cpu(&x, rows, cols, &w, 1e-6).0, &reference::rms_norm(&wide(&x), cols, &wide(&w), 1e-6).0),
                };
                (format!("{rows}x{cols}"), err)
            }
        };
        let pass = err <= if op == "attention_fp8" { rustile_ops::testing::FP8_P_TOL } else { tolerance::<bf16>() };
        ok &= pass;
        println!("{op:<10} {shape:>12} {:>6} {err:>12.2e} {:>8.1}ms {}", match op.as_str() { "gemm_fp8" | "attention_fp8" => "e4m3", "dual_gemm_nvfp4" => "e2m1", "trimul" => "f32", _ => "bf16" }, t0.elapsed().as_secs_f64() * 1e3, if pass { "ok" } else { "WRONG" });
    }
    println!("(CPU interpreter results are checks, not speed; seed {seed})");
    ok
}
