//! Our side of the TriMul benchmark: GPU MODE's seven shapes, each checked
//! on sampled pairs against float64, then timed whole and per kernel.
//! `torch_baselines.py` times the straightforward PyTorch implementation
//! (eager and `torch.compile`) at the same shapes; rows join by op
//! (`trimul`) and shape (`NxBxD`), and [`summary`] prints the geometric means.
use crate::harness::{measure, MeasureCfg, Row, RUSTILE};

use rustile_host::{Error, Gpu, Result};
use rustile_ops::testing::{allclose_ratio, rng, TriMulCase};
use rustile_ops::gemm::{gemm_tma_kernel, Config};
use rustile_ops::trimul::{BenchShape, Dims, Projection, BENCH_SHAPES};

/// H100 SXM's dense bf16 tensor-core peak (the datasheet's, 989 TFLOP/s):
/// the compute side of each shape's floor.
const PEAK_FLOPS: f64 = 989e12;

/// FLOPs of the update: the five projections, the contraction, the output projection.
pub fn flops(d: Dims) -> f64 {
    let rows = (d.batch * d.n * d.n) as f64;
    let (dim, hidden) = (d.dim as f64, d.hidden as f64);
    2.0 * rows * dim * 5.0 * hidden + 2.0 * (d.batch as f64) * hidden * (d.n as f64).powi(3) + 2.0 * rows * hidden * dim
}

/// Bytes any implementation moves at least: x and the mask read, out written (fp32).
pub fn bytes(s: &BenchShape) -> f64 {
    let rows = (s.batch * s.n * s.n) as f64;
    4.0 * rows * (2 * s.dim) as f64 + if s.masked { 4.0 * rows } else { 0.0 }
}

fn shape(s: &BenchShape) -> [usize; 3] {
    [s.n, s.batch, s.dim]
}

/// The shapes for `torch_baselines.py --trimul`: `NxBxD`, then `m` if masked
/// and `c` if x is drawn from Cauchy(0, 2), comma-separated.
pub fn spec() -> String {
    let one = |s: &BenchShape| format!("{}{}{}", crate::harness::shape_str(&shape(s)), if s.masked { "m" } else { "" }, if s.cauchy { "c" } else { "" });
    BENCH_SHAPES.iter().map(one).collect::<Vec<_>>().join(",")
}

/// Checks and times `ops::trimul` at GPU MODE's shapes; `copy_gb_s` is the
/// measured copy bandwidth (the memory side of each shape's floor). With
/// `sweep`, on Hopper, also the `mma.sync` projection and the contraction on
/// every TMA GEMM config (printed, not rows).
pub fn bench_trimul(gpu: &Gpu, cfg: &MeasureCfg, copy_gb_s: f64, sweep: bool) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    eprintln!("trimul: time per kernel, and the floor max(bytes / {copy_gb_s:.0} GB/s, FLOPs / {:.0} TFLOP/s)", PEAK_FLOPS / 1e12);
    for s in BENCH_SHAPES {
        let (mut rng, seed) = rng();
        let case = TriMulCase::new(&mut rng, s.dims(), s.cauchy, s.masked);
        let Dims { batch, n, dim, .. } = case.dims;
        crate::harness::status(format!("trimul batch {batch} n {n} dim {dim}"));
        let (tm, x, mask) = case.upload(gpu)?;
        let mut ws = tm.workspace(gpu, batch, n)?;
        let mut out = gpu.alloc::<f32>(&[batch, n, n, dim])?;
        gpu.fill_bytes(&mut out, 0xFF)?;
        tm.forward_into(gpu, &x, mask.as_ref(), &mut ws, &mut out)?;

        // Eight pairs against float64: the four corners and four at random.
        let at = case.sample_pairs(&mut rng, 4);
        let worst = allclose_ratio(&case.rows_at(&gpu.download(&out)?, &at), &case.want_at(&at), 2e-2, 2e-2);
        eprintln!("trimul {s:?}: sampled error {worst:.2} of the tolerance (seed {seed})");
        if worst > 1.0 {
            return Err(Error::Launch { kernel: "trimul".into(), msg: format!("wrong result at {s:?}: {worst:.2} × rtol = atol = 2e-2 (seed {seed})") });
        }

        let whole = measure(gpu, cfg, || tm.forward_into(gpu, &x, mask.as_ref(), &mut ws, &mut out))?;
        let project = measure(gpu, cfg, || tm.project(gpu, &x, mask.as_ref(), &mut ws))?;
        let contract = measure(gpu, cfg, || tm.contract(gpu, &mut ws))?;
        let finish = measure(gpu, cfg, || tm.finish(gpu, &ws, &mut out))?;
        // Beside the wgmma projection: the mma.sync one, and the contraction
        // on each TMA GEMM config (what its choice leaves on the table).
        if sweep && Projection::best(gpu) == Projection::Wgmma {
            let mma = measure(gpu, cfg, || tm.project_with(gpu, &x, mask.as_ref(), &mut ws, Projection::Mma))?;
            let mut sweep = String::new();
            for (i, c) in gemm_tma_kernel::CONFIGS.iter().enumerate() {
                let t = measure(gpu, cfg, || tm.contract_with(gpu, &mut ws, Some(Config::Tma(i))))?;
                sweep += &format!(" {}: {:.3}", c.name, t.median_ms);
            }
            eprintln!("  project on mma.sync {:.3} ms; contract by TMA config:{sweep}", mma.median_ms);
        }
        let floor_ms = (bytes(&s) / (copy_gb_s * 1e9)).max(flops(case.dims) / PEAK_FLOPS) * 1e3;
        let ms = whole.median_ms;
        eprintln!(
            "  {:.3} ms ({:.0} TFLOP/s): project {:.3}, contract {:.3}, finish {:.3}; floor {floor_ms:.3} ms ({:.0} % of ours)",
            ms,
            flops(case.dims) / ms / 1e9,
            project.median_ms,
            contract.median_ms,
            finish.median_ms,
            100.0 * floor_ms / ms
        );
        rows.push(Row::new("trimul", &shape(&s), "f32", RUSTILE, whole).flops(flops(case.dims)).bytes(bytes(&s)));
        for (step, stats) in [("project", project), ("contract", contract), ("finish", finish)] {
            rows.push(Row::new(&format!("trimul.{step}"), &shape(&s), "bf16", RUSTILE, stats));
        }
    }
    Ok(rows)
}

/// The geometric mean over the seven shapes of each implementation that ran all of them.
pub fn summary(rows: &[Row]) {
    let mut imps: Vec<&str> = rows.iter().filter(|r| r.op == "trimul").map(|r| r.imp.as_str()).collect();
    imps.sort();
    imps.dedup();
    for imp in imps {
        let times: Vec<f64> = rows.iter().filter(|r| r.op == "trimul" && r.imp == imp).map(|r| r.median_ms).collect();
        if times.len() == BENCH_SHAPES.len() {
            let geo = (times.iter().map(|t| t.ln()).sum::<f64>() / times.len() as f64).exp();
            println!("trimul geometric mean over GPU MODE's 7 shapes: {imp:>14} {geo:.3} ms");
        }
    }
}
