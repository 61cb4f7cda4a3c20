//! `rustile-tune`: the autotuner binary that `cargo xtask autotune` builds
//! and runs. On a GPU machine without Rust, carry it (it embeds the kernels)
//! and run it with the same flags.
use std::path::PathBuf;

use clap::Parser;
use rustile_bench::cublas::Blas;
use rustile_bench::tune::{merge_and_write, tune_op, OPS};
use rustile_host::Gpu;

#[derive(Parser)]
#[command(about = "Tunes each op's config per shape bucket on this GPU and writes tuned/<arch>.toml")]
struct Args {
    /// The table to write: sm90 (Hopper) or sm80 (Ampere and Ada); must match this GPU.
    #[arg(long)]
    arch: String,
    /// Only this op (default: all of them).
    #[arg(long)]
    op: Option<String>,
    /// Fewer buckets and repetitions.
    #[arg(long)]
    quick: bool,
    /// Where to write (default: tuned/<arch>.toml).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    let args = Args::parse();
    rustile_bench::init_logging();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let gpu = Gpu::new().map_err(|e| format!("the tuner needs a GPU: {e}"))?;
    let here = rustile_ops::tune::arch_of(gpu.compute_capability());
    if here != Some(args.arch.as_str()) {
        return Err(format!("this GPU ({}) is {}, not {}", gpu.name(), here.unwrap_or("an arch we do not tune"), args.arch));
    }
    let ops: Vec<&str> = match &args.op {
        Some(op) if OPS.iter().any(|(o, _)| o == op) => vec![op.as_str()],
        Some(op) => return Err(format!("unknown op {op}; the tuner knows {}", OPS.iter().map(|o| o.0).collect::<Vec<_>>().join(", "))),
        None => OPS.iter().map(|o| o.0).collect(),
    };
    // The wgmma kernels exist on sm_90a only.
    let hopper_only = ["gemm_wgmma", "gemm_tma", "dual_gemm_tma", "gemm_fp8", "attention", "dual_gemm_nvfp4", "gemm_nvfp4"];
    let wgmma_here = rustile_ops::gemm::gemm_wgmma_kernel::supported(&gpu);
    if let Some(op) = args.op.as_deref().filter(|op| hopper_only.contains(op) && !wgmma_here) {
        return Err(format!("{op} needs an sm_90a GPU; {} is not one", gpu.name()));
    }
    let ops: Vec<&str> = ops.into_iter().filter(|op| !hopper_only.contains(op) || wgmma_here).collect();
    // Every candidate is checked before it is timed: a GEMM against cuBLAS, attention and NVFP4 against float64.
    let blas = Blas::new(&gpu)?;
    eprintln!("tuning {} on {} ({} SMs){}", ops.join(", "), gpu.name(), gpu.sm_count(), if args.quick { ", quick" } else { "" });
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("tuned/{}.toml", args.arch)));
    // Each op's table is written as soon as it is done: a run cut short keeps what it finished.
    for op in ops {
        let table = tune_op(&gpu, &blas, op, args.quick).map_err(|e| format!("tuning {op}: {e}"))?;
        merge_and_write(&out, &args.arch, vec![table]).map_err(|e| format!("writing {}: {e}", out.display()))?;
        eprintln!("wrote {op} into {}", out.display());
    }
    Ok(())
}
