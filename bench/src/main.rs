//! `rustile-bench`: every op against its best baseline, on one GPU, in one run.
//!
//! Prints a table and writes JSON (see `harness::Report`). Without a GPU it
//! says so and runs the CPU interpreter at small sizes instead.

use std::path::PathBuf;

use clap::Parser;
use rustile_host::{Error, Gpu};

use rustile_bench::cublas::{Blas, BlasLt};
use rustile_bench::harness::{self, MeasureCfg, Report};
use rustile_bench::{attention, delta_rule, fp8, gemm, nvfp4, ops, quasar, torch, trimul, Sizes};

/// The ops this bench knows, in table order.
const OPS: &[&str] = &["add", "swiglu", "softmax", "layernorm", "rmsnorm", "gemm", "dual_gemm", "mlp", "grouped", "gemm_fp8", "dual_gemm_nvfp4", "attention", "attention_fp8", "trimul", "delta_rule", "quasar"];
/// The ops measured against cuBLAS / cuBLASLt (in this process) rather than PyTorch.
const GEMM_OPS: &[&str] = &["gemm", "dual_gemm", "mlp", "grouped", "gemm_fp8", "dual_gemm_nvfp4"];

#[derive(Parser, Debug)]
#[command(about = "Rustile ops against PyTorch (eager and torch.compile) on this GPU")]
struct Args {
    /// Comma-separated ops to run.
    #[arg(long, value_delimiter = ',', default_value = "add,swiglu,softmax,layernorm,rmsnorm,gemm,dual_gemm,mlp,grouped,gemm_fp8,dual_gemm_nvfp4,attention,attention_fp8,trimul,delta_rule,quasar")]
    ops: Vec<String>,
    /// Rows of the row-wise ops (softmax, layernorm, rmsnorm).
    #[arg(long, default_value_t = 8192)]
    rows: usize,
    /// Columns of the row-wise ops.
    #[arg(long, default_value_t = 8192)]
    cols: usize,
    /// Elements of the element-wise ops (add, swiglu).
    #[arg(long, default_value_t = 1 << 28)]
    numel: usize,
    /// GEMM shapes, comma-separated: MxNxK (C[M,N] = A[M,K]·B[N,K]ᵀ) or a
    /// suite: square (1024-8192), llm, skinny, all.
    #[arg(long, value_delimiter = ',', default_value = "4096x4096x4096")]
    mnk: Vec<String>,
    /// Attention shapes, comma-separated: BxSqxSkxHxHkvxD, `c` appended for
    /// causal (Sk: the keys each query block may see), or `issue` for the
    /// issue's suite (16k tokens at S = 512..16k, D 64/128; the vision encoder;
    /// the rectangular 10k+1k and 200k+5k).
    #[arg(long, value_delimiter = ',', default_value = "issue")]
    attn: Vec<String>,
    /// Delta-rule and QuasarAttention lengths (tokens of one sequence, 8 heads of 64), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = delta_rule::TOKENS.to_vec())]
    tokens: Vec<usize>,
    /// Only check the GEMM-family ops at the --mnk shapes against cuBLAS (and
    /// float64 on sampled rows); time nothing. Exits non-zero on a mismatch.
    #[arg(long)]
    check: bool,
    /// Element type: f32, bf16 or f16.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench/results.json")]
    json: PathBuf,
    /// Also time PyTorch baselines (default: on when `import torch` works).
    #[arg(long, overrides_with = "no_torch")]
    torch: bool,
    /// Skip the PyTorch baselines.
    #[arg(long)]
    no_torch: bool,
    /// The Python that has torch.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Run this copy of torch_baselines.py instead of the one built into the binary.
    #[arg(long)]
    torch_script: Option<PathBuf>,
    /// Also time every config of each op's kernel.
    #[arg(long)]
    sweep: bool,
    /// Timed repetitions per measurement.
    #[arg(long, default_value_t = 100)]
    reps: usize,
}

fn main() {
    let args = Args::parse();
    rustile_bench::init_logging();
    let shapes = gemm::parse_shapes(&args.mnk).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    if let Some(bad) = args.ops.iter().find(|o| !OPS.contains(&o.as_str())) {
        eprintln!("unknown op `{bad}`; known ops: {}", OPS.join(", "));
        std::process::exit(2);
    }
    if !["f32", "bf16", "f16"].contains(&args.dtype.as_str()) {
        eprintln!("unknown dtype `{}`; use f32, bf16 or f16", args.dtype);
        std::process::exit(2);
    }
    let attn_shapes = attention::parse_shapes(&args.attn).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let sizes = Sizes { rows: args.rows, cols: args.cols, numel: args.numel, dtype: args.dtype.clone() };

    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) if e.is_no_gpu() => {
            println!("no GPU found ({}): running the CPU interpreter at small sizes", short_reason(&e));
            if !ops::cpu_fallback(&args.ops) {
                std::process::exit(1);
            }
            return;
        }
        // A GPU that is there but cannot be opened is a failure, not a reason
        // to time the interpreter instead.
        Err(e) => {
            eprintln!("a GPU is present but could not be opened: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = bench_gpu(&gpu, &args, &sizes, &shapes, &attn_shapes) {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// Where the delta-rule bench leaves inputs and outputs for FLA's check in `torch_baselines.py`.
fn delta_check_dir() -> PathBuf {
    std::env::temp_dir().join(format!("rustile-delta-check-{}", std::process::id()))
}

fn short_reason(e: &Error) -> String {
    match e {
        Error::NoDriver(why) => format!("libcuda could not be loaded: {why}"),
        _ => "the CUDA driver sees no device".into(),
    }
}

fn bench_gpu(gpu: &Gpu, args: &Args, sizes: &Sizes, shapes: &[[usize; 3]], attn_shapes: &[attention::Shape]) -> rustile_host::Result<()> {
    eprintln!(
        "{}: {}, {} SMs, {} MiB L2, {} GiB",
        gpu.name(),
        rustile_host::native_arch(gpu.compute_capability()),
        gpu.sm_count(),
        gpu.l2_bytes() >> 20,
        gpu.mem_bytes() >> 30
    );
    let cfg = MeasureCfg { reps: args.reps, ..MeasureCfg::default() };
    let blas = match Blas::new(gpu) {
        Ok(b) => Some(b),
        Err(why) => {
            eprintln!("cuBLAS baselines skipped: {why}");
            None
        }
    };
    // cuBLASLt (a handle and a 32 MiB workspace) serves the FP8 GEMM, and the
    // GEMM's `mma.sync` row with cuBLAS's own `mma.sync` kernels.
    let lt = match args.ops.iter().any(|o| o == "gemm_fp8" || o == "gemm").then(|| BlasLt::new(gpu)) {
        Some(Ok(b)) => Some(b),
        Some(Err(why)) => {
            eprintln!("cuBLASLt baselines skipped: {why}");
            None
        }
        None => None,
    };
    let gemm_ops = |ops: &[String]| ops.iter().filter(|o| GEMM_OPS.contains(&o.as_str())).cloned().collect::<Vec<_>>();
    let run_gemm = |op: &str, check_only: bool| match op {
        "gemm_fp8" => fp8::bench_fp8(gpu, &cfg, lt.as_ref(), shapes, check_only),
        "dual_gemm_nvfp4" => nvfp4::bench_nvfp4(gpu, &cfg, blas.as_ref(), check_only),
        _ => gemm::bench_family(gpu, &cfg, (blas.as_ref(), lt.as_ref()), op, &sizes.dtype, shapes, args.sweep, check_only),
    };
    if args.check {
        if blas.is_none() {
            return Err(Error::Invalid("--check compares with cuBLAS, which did not load".into()));
        }
        for op in gemm_ops(&args.ops) {
            run_gemm(&op, true)?;
        }
        eprintln!("check passed");
        return Ok(());
    }
    let copy = harness::copy_bandwidth(gpu, &cfg)?;
    eprintln!("device copy bandwidth (read + write): {copy:.0} GB/s");

    let mut report = Report::new(gpu.name(), Some(copy));
    let bar = harness::progress(args.ops.len(), "bench");
    for op in &args.ops {
        bar.set_message(op.clone());
        bar.inc(1);
        if GEMM_OPS.contains(&op.as_str()) {
            report.rows.extend(run_gemm(op, false)?);
        } else if op == "attention" {
            report.rows.extend(attention::bench_attention(gpu, &cfg, attn_shapes)?);
        } else if op == "attention_fp8" {
            report.rows.extend(attention::bench_attention_fp8(gpu, &cfg, attn_shapes, args.sweep)?);
        } else if op == "trimul" {
            report.rows.extend(trimul::bench_trimul(gpu, &cfg, copy, args.sweep)?);
        } else if op == "delta_rule" {
            report.rows.extend(delta_rule::bench_delta_rule(gpu, &cfg, copy, &args.tokens, Some(&delta_check_dir()), args.sweep)?);
        } else if op == "quasar" {
            report.rows.extend(quasar::bench_quasar(gpu, &cfg, &args.tokens)?);
        } else {
            report.rows.extend(ops::bench_op(gpu, &cfg, op, sizes, args.sweep)?);
        }
    }
    bar.finish_and_clear();
    // (SDPA has no FP8 attention: that op's baseline is our bf16 forward, timed beside it.)
    let torch_ops: Vec<String> = args.ops.iter().filter(|o| !GEMM_OPS.contains(&o.as_str()) && *o != "attention_fp8").cloned().collect();

    let want_torch = !torch_ops.is_empty() && if args.no_torch { false } else { args.torch || torch::available(&args.python) };
    if want_torch {
        let script = match &args.torch_script {
            Some(path) => Ok(path.clone()),
            None => torch::embedded_script(),
        };
        match script {
            Err(e) => eprintln!("torch baselines skipped: {e}"),
            Ok(script) => {
                let req = torch::Request {
                    ops: &torch_ops,
                    rows: sizes.rows,
                    cols: sizes.cols,
                    numel: sizes.numel,
                    dtype: &sizes.dtype,
                    attn: &attention::spec(attn_shapes),
                    trimul: &trimul::spec(),
                    delta: &delta_rule::spec(&args.tokens),
                    delta_check: &delta_check_dir(),
                };
                match torch::run(&args.python, &script, &req) {
                    Ok(rows) => report.rows.extend(rows),
                    Err(e) => eprintln!("torch baselines skipped: {e}"),
                }
                if args.torch_script.is_none() {
                    let _ = std::fs::remove_file(&script);
                }
                let _ = std::fs::remove_dir_all(delta_check_dir());
            }
        }
    } else if !args.no_torch {
        eprintln!("torch baselines skipped: `{} -c 'import torch'` failed", args.python);
    }

    report.finish();
    report.print_table();
    if args.ops.iter().any(|o| o == "trimul") {
        trimul::summary(&report.rows);
    }
    match report.write_json(&args.json) {
        Ok(()) => eprintln!("wrote {}", args.json.display()),
        Err(e) => eprintln!("could not write {}: {e}", args.json.display()),
    }
    // Beside the JSON: a chart a op against its baselines, and the roofline.
    match rustile_bench::report::charts(&report, &args.json) {
        Ok(written) => written.iter().for_each(|p| eprintln!("wrote {}", p.display())),
        Err(e) => eprintln!("could not write the charts beside {}: {e}", args.json.display()),
    }
    Ok(())
}

