//! The autotuner behind `cargo xtask autotune --arch sm90` (the rules are in
//! `rustile_ops::tune`'s module doc): for each op, each bucket's
//! representative shape, each candidate config: prune, check, time; then the
//! winner and every candidate's result go into `tuned/<arch>.toml`.
use std::path::Path;

use rustile::{bf16, KernelConfig, F8E4M3};
use rustile_host::{Gpu, Result, Tensor};
use rustile_ops::testing::{cast, normal, rng, wide};
use rustile_ops::tune::{bucket_name, source_hash, Bucket, Candidate, OpTable, Table, RUSTC_VERSION};
use rustile_ops::gemm_fp8::{self, Scale};
use rustile_ops::{dual_gemm, gemm};
use serde::Deserialize;

use crate::cublas::Blas;
use crate::gemm::{close, cublas_swiglu};
use crate::harness::{measure_each, shape_str, utc_now, MeasureCfg};

/// The ops the tuner knows, and the kernel each one dispatches to
/// (`attention`: Hopper's forward, tuned in `crate::attention::tune`;
/// `dual_gemm_nvfp4`, `gemm_nvfp4`: the warp-specialized kernels, in
/// `crate::nvfp4::tune`).
pub const OPS: &[(&str, &str)] = &[
    ("gemm_nt", "gemm_nt_kernel"),
    ("gemm_wgmma", "gemm_wgmma_kernel"),
    ("gemm_tma", "gemm_tma_kernel"),
    ("dual_gemm", "dual_gemm_kernel"),
    ("dual_gemm_tma", "dual_gemm_tma_kernel"),
    ("gemm_fp8", "gemm_fp8_kernel"),
    ("attention", "attention_fwd_wgmma_kernel"),
    ("dual_gemm_nvfp4", "dual_gemm_nvfp4_ws_kernel"),
    ("gemm_nvfp4", "gemm_nvfp4_ws_kernel"),
];

/// The representative shapes tuned for `op` (one per bucket): the bench's
/// suites (square, LLM, skinny) plus the two GEMMs of issue 3's MLP (16k
/// rows, d_model 512 → d_ff 1365 → 512, the hidden padded to 1368 as
/// `ops::mlp` and the TransformerNP run it), the grouped heads' last layer
/// (1368 → 3), 512³, and the TransformerNP's products at its small shape
/// (36 096 tokens: 512 → 512, 512 → 1368 and back; the heads' 32 000
/// targets, 512 → 13 680 and back); `quick` keeps the headline
/// ones. Candidates run in bf16; the winners serve f16 too. The FP8 GEMM
/// runs in e4m3 (the winners serve e5m2) at the shapes whose K it takes
/// (multiples of 16).
pub fn shapes(op: &str, quick: bool) -> Vec<[usize; 3]> {
    if quick {
        return if op.starts_with("dual_gemm") { vec![[8192, 11008, 4096], [8192, 4096, 4096]] } else { vec![[4096; 3], [8192; 3]] };
    }
    let mut shapes: Vec<[usize; 3]> = crate::gemm::SUITES.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    shapes.extend([[512, 512, 512], [16384, 1368, 512], [16384, 512, 1368], [16384, 3, 1368]]);
    shapes.extend([[36096, 512, 512], [36096, 1368, 512], [36096, 512, 1368], [32000, 13680, 512], [32000, 512, 13680]]);
    if op == "gemm_fp8" {
        shapes.retain(|s| s[2] % 16 == 0);
    }
    shapes
}

/// One entry of the ptxas report `cargo xtask build` embeds.
#[derive(Deserialize)]
struct KernelResources {
    name: String,
    registers: u32,
    spill_store_bytes: u32,
}
#[derive(Deserialize)]
pub(crate) struct Report {
    ptxas: String,
    kernels: Vec<KernelResources>,
}

/// The embedded ptxas report of `arch` (`sm_90a`), if the build had one.
pub(crate) fn report(arch: &str) -> Option<Report> {
    let (_, text) = rustile_ops::RESOURCE_REPORTS.iter().find(|(a, _)| *a == arch)?;
    serde_json::from_str(text).ok()
}

/// Why config `c` of `kernel` cannot run well on this GPU (from the ptxas
/// report and the GPU's limits), or `None`.
pub(crate) fn pruned(gpu: &Gpu, report: Option<&Report>, kernel: &str, c: &KernelConfig, dtype: &str) -> Option<String> {
    if c.smem_bytes > gpu.smem_per_block() {
        return Some(format!("needs {} bytes of shared memory, the GPU allows {}", c.smem_bytes, gpu.smem_per_block()));
    }
    let entry = format!("{kernel}__{}__{dtype}", c.name);
    let k = report?.kernels.iter().find(|k| k.name == entry)?;
    if k.spill_store_bytes > 0 {
        return Some(format!("spills {} bytes (ptxas)", k.spill_store_bytes));
    }
    if k.registers * c.threads > 65536 {
        return Some(format!("{} registers × {} threads exceed the SM's 65536", k.registers, c.threads));
    }
    None
}

/// One op at one shape on fresh bf16 inputs, with cuBLAS's answer. For the
/// FP8 GEMM the inputs are drawn in e4m3 (`fp8`: A and B), and `a`, `b`
/// hold the same values in bf16 (exactly), which cuBLAS multiplies.
struct Problem<'a> {
    gpu: &'a Gpu,
    op: &'a str,
    a: Tensor<bf16>,
    b: Tensor<bf16>,
    fp8: Option<(Tensor<F8E4M3>, Tensor<F8E4M3>)>,
    b2: Tensor<bf16>,
    out: Tensor<bf16>,
    want: Vec<f64>,
}

impl<'a> Problem<'a> {
    fn new(gpu: &'a Gpu, blas: &Blas, op: &'a str, [m, n, k]: [usize; 3]) -> Result<Problem<'a>> {
        let (mut rng, _) = rng();
        let mut fresh = |rows: usize| -> Result<(Tensor<bf16>, Option<Tensor<F8E4M3>>)> {
            if op != "gemm_fp8" {
                return Ok((gpu.upload(&normal::<bf16>(&mut rng, rows * k, 0.0, 1.0), &[rows, k])?, None));
            }
            let q = normal::<F8E4M3>(&mut rng, rows * k, 0.0, 1.0);
            Ok((gpu.upload(&cast::<_, bf16>(&q), &[rows, k])?, Some(gpu.upload(&q, &[rows, k])?)))
        };
        let ((a, a8), (b, b8), (b2, _)) = (fresh(m)?, fresh(n)?, fresh(n)?);
        let fp8 = a8.zip(b8);
        let mut want = gpu.alloc::<bf16>(&[m, n])?;
        if op.starts_with("dual_gemm") {
            let (mut gate, mut up) = (gpu.alloc::<bf16>(&[m, n])?, gpu.alloc::<bf16>(&[m, n])?);
            cublas_swiglu(gpu, blas, &a, [&b, &b2], [&mut gate, &mut up], &mut want)?;
        } else {
            blas.gemm_nt(&a, &b, &mut want)?;
        }
        let want = wide(&gpu.download(&want)?);
        Ok(Problem { gpu, op, a, b, fp8, b2, out: gpu.alloc::<bf16>(&[m, n])?, want })
    }

    /// Runs config `cfg` of the op's kernel once.
    fn run(&mut self, cfg: usize) -> Result<()> {
        let (gpu, c) = (self.gpu, &mut self.out);
        let cfg = match self.op {
            "dual_gemm" => return dual_gemm::dual_gemm_with_config(gpu, cfg, &self.a, &self.b, &self.b2, c),
            "dual_gemm_tma" => return dual_gemm::dual_gemm_with_config(gpu, gemm::Config::Tma(cfg), &self.a, &self.b, &self.b2, c),
            "gemm_wgmma" => gemm::Config::Wgmma(cfg),
            "gemm_tma" => gemm::Config::Tma(cfg),
            "gemm_fp8" => {
                let (a8, b8) = self.fp8.as_ref().expect("gemm_fp8 problems hold e4m3 operands");
                return gemm_fp8::gemm_fp8_with_config(gpu, cfg, a8, b8, c, Scale::None, Scale::None, &gemm::Epilogue::new());
            }
            _ => gemm::Config::Mma(cfg),
        };
        gemm::gemm_nt_with_config(gpu, cfg, &self.a, &self.b, c, &gemm::Epilogue::new())
    }

    /// Runs config `cfg` on a poisoned output and checks every element against cuBLAS.
    fn check(&mut self, cfg: usize) -> Result<String> {
        self.gpu.fill_bytes(&mut self.out, 0xFF)?;
        self.run(cfg)?;
        close("result", &self.gpu.download(&self.out)?, &self.want)
    }
}

/// Tunes `op` on this GPU: every bucket of `shapes(op, quick)`.
pub fn tune_op(gpu: &Gpu, blas: &Blas, op: &str, quick: bool) -> Result<OpTable> {
    let (_, kernel) = *OPS.iter().find(|(o, _)| *o == op).expect("ops are checked by the caller");
    if op == "attention" {
        return crate::attention::tune(gpu, kernel, quick);
    }
    if op.ends_with("nvfp4") {
        return crate::nvfp4::tune(gpu, op, kernel, quick);
    }
    let configs = match op {
        "dual_gemm" => dual_gemm::dual_gemm_kernel::CONFIGS,
        "dual_gemm_tma" => dual_gemm::dual_gemm_tma_kernel::CONFIGS,
        "gemm_wgmma" => gemm::gemm_wgmma_kernel::CONFIGS,
        "gemm_tma" => gemm::gemm_tma_kernel::CONFIGS,
        "gemm_fp8" => gemm_fp8::gemm_fp8_kernel::CONFIGS,
        _ => gemm::gemm_nt_kernel::CONFIGS,
    };
    let dtype = if op == "gemm_fp8" { "e4m3_bf16" } else { "bf16" };
    let image = rustile_host::native_arch(gpu.compute_capability());
    let report = report(&image);
    if report.is_none() {
        eprintln!("tune: no ptxas report for {image} embedded; pruning by shared memory only");
    }
    let mcfg = measure_cfg(quick);
    let shapes = shapes(op, quick);
    let mut buckets = vec![];
    let bar = crate::harness::progress(shapes.len(), &format!("tune {op}"));
    for (si, &shape) in shapes.iter().enumerate() {
        bar.set_message(format!("{}: checking and timing {} configs", shape_str(&shape), configs.len()));
        let mut p = Problem::new(gpu, blas, op, shape)?;
        let tag = format!("[{}/{}] {op} {}", si + 1, shapes.len(), shape_str(&shape));
        let verdict = |p: &mut Problem, i: usize| pruned(gpu, report.as_ref(), kernel, &configs[i], dtype).or_else(|| p.check(i).err().map(|e| e.to_string()));
        let all: Vec<usize> = (0..configs.len()).collect();
        let tuned = tune_bucket(gpu, &mcfg, &tag, configs, &all, &mut p, verdict, |p, i| p.run(i))?;
        keep_bucket(&mut buckets, op, shape_str(&shape), bucket_name(&shape), tuned);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(op_table(gpu, op, kernel, report, buckets))
}

/// The repetitions of a tuning run: 30 (10 `quick`), L2 flushed before each.
pub fn measure_cfg(quick: bool) -> MeasureCfg {
    MeasureCfg { reps: if quick { 10 } else { 30 }, warmup: 3, warmup_ms: 10.0, flush_l2: true }
}

/// Adds bucket `bucket` of `op` (timed at `shape`) to `buckets` when a
/// candidate was valid, and says which won or that it stays untuned.
pub(crate) fn keep_bucket(buckets: &mut Vec<Bucket>, op: &str, shape: String, bucket: String, tuned: Option<Bucket>) {
    match tuned {
        Some(b) => {
            eprintln!("    {op} {shape}: bucket {bucket} → {}", b.best);
            buckets.push(Bucket { bucket, shape, ..b });
        }
        None => eprintln!("    {op} {shape}: no valid candidate; the bucket stays untuned"),
    }
}

/// One op's tuned buckets with their provenance.
pub(crate) fn op_table(gpu: &Gpu, op: &str, kernel: &str, report: Option<Report>, buckets: Vec<Bucket>) -> OpTable {
    let ptxas = report.map(|r| r.ptxas).unwrap_or_else(|| "ptxas unknown".into());
    OpTable {
        name: op.into(),
        kernel: kernel.into(),
        source_hash: source_hash(op).unwrap_or("?").into(),
        toolchain: format!("{RUSTC_VERSION}; {ptxas}"),
        device: gpu.name().into(),
        date: utc_now(),
        buckets,
        ..OpTable::default()
    }
}

/// One bucket: every candidate in `candidates` (indices into `configs`)
/// pruned and checked first (`verdict`: why it cannot serve, or `None`),
/// then the valid ones timed together (`run` launches one once); the
/// winner and every candidate's result, or `None` when none was valid. The
/// bucket's names are the caller's to fill in.
#[allow(clippy::too_many_arguments)]
pub fn tune_bucket<P>(
    gpu: &Gpu,
    mcfg: &MeasureCfg,
    tag: &str,
    configs: &[KernelConfig],
    candidates: &[usize],
    problem: &mut P,
    mut verdict: impl FnMut(&mut P, usize) -> Option<String>,
    mut run: impl FnMut(&mut P, usize) -> Result<()>,
) -> Result<Option<Bucket>> {
    let verdicts: Vec<Option<String>> = candidates.iter().map(|&i| verdict(problem, i)).collect();
    let valid: Vec<usize> = (0..candidates.len()).filter(|&j| verdicts[j].is_none()).collect();
    let stats = measure_each(gpu, mcfg, valid.len(), |v| run(problem, candidates[valid[v]]))?;
    let mut out = vec![];
    for (j, &i) in candidates.iter().enumerate() {
        let name = configs[i].name;
        out.push(match (&verdicts[j], valid.iter().position(|&v| v == j)) {
            (Some(why), _) => {
                eprintln!("{tag} {name}: invalid ({why})");
                Candidate { config: name.into(), median_ms: None, invalid: Some(why.clone()) }
            }
            (None, Some(v)) => {
                eprintln!("{tag} {name}: {:.1} us", stats[v].median_ms * 1e3);
                Candidate { config: name.into(), median_ms: Some(stats[v].median_ms), invalid: None }
            }
            (None, None) => unreachable!("a config with no verdict is valid"),
        });
    }
    let best = out.iter().filter(|c| c.invalid.is_none()).min_by(|a, b| a.median_ms.partial_cmp(&b.median_ms).unwrap()).map(|c| c.config.clone());
    Ok(best.map(|best| Bucket { best, candidates: out, ..Bucket::default() }))
}

/// Replaces `tuned`'s entries for the ops in `fresh` and writes the table to `path`.
pub fn merge_and_write(path: &Path, arch: &str, fresh: Vec<OpTable>) -> std::io::Result<()> {
    let mut table = std::fs::read_to_string(path).ok().and_then(|t| Table::parse(&t).ok()).unwrap_or_default();
    table.arch = arch.into();
    for op in fresh {
        table.ops.retain(|o| o.name != op.name);
        table.ops.push(op);
    }
    table.ops.sort_by(|a, b| a.name.cmp(&b.name));
    let header = format!(
        "# Written by `cargo xtask autotune --arch {arch}` (bench/src/tune.rs); the rules are in\n\
         # rustile_ops::tune. Per op: provenance, then per bucket the winner and every candidate.\n"
    );
    std::fs::write(path, header + &table.to_toml())
}
