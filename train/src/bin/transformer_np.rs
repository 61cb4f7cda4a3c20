//! Trains the TransformerNP on Gaussian-process batches and reports each
//! step: `cargo run --release -p rustile-train --bin transformer-np --
//! --shape small --steps 50 [--graphs] [--checkpoint]`. Without a GPU it
//! trains a tiny configuration in the CPU interpreter, and says so.
use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use rustile_host::{Error, Gpu, Result};
use rustile_ops::adamw::AdamW;
use rustile_train::data::GpData;
use rustile_train::{Config, Shape, TransformerNp};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ShapeArg {
    /// (M, N) = (64, 500), B = 64.
    Small,
    /// (10 000, 1 000), B = 4.
    Mid,
    /// (200 000, 5 000), B = 1.
    Large,
    /// The interpreter's: a 2-layer d = 64 model on (16, 16), B = 2.
    Tiny,
}

impl ShapeArg {
    fn shape(self) -> Shape {
        let (batch, context, targets) = match self {
            ShapeArg::Small => (64, 64, 500),
            ShapeArg::Mid => (4, 10_000, 1_000),
            ShapeArg::Large => (1, 200_000, 5_000),
            ShapeArg::Tiny => (2, 16, 16),
        };
        Shape { batch, context, targets }
    }
}

#[derive(Parser, Debug)]
#[command(about = "Train the Transformer Neural Process on Rustile kernels")]
struct Args {
    #[arg(long, value_enum, default_value = "small")]
    shape: ShapeArg,
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Replay each step as one captured CUDA graph.
    #[arg(long)]
    graphs: bool,
    /// Keep only each layer's input; recompute the rest in the backward.
    #[arg(long)]
    checkpoint: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the first batch, the initial parameters, the loss and every
    /// gradient of one forward and backward (no update) into this folder,
    /// for `bench/transformer_np.py --check`.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// After the timed steps, time one more step kernel by kernel and print
    /// where its time goes (the attention share, the distance from the floor).
    #[arg(long)]
    profile: bool,
    /// Print a line every this many steps.
    #[arg(long, default_value_t = 1)]
    every: usize,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("transformer-np: {e}");
        std::process::exit(1);
    }
}

fn run(mut args: Args) -> Result<()> {
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) if e.is_no_gpu() => {
            eprintln!("transformer-np: no GPU ({e}): training a tiny model (2 layers, d = 64) on (16, 16), B = 2, in the CPU interpreter");
            args.shape = ShapeArg::Tiny;
            if args.graphs {
                eprintln!("transformer-np: --graphs needs a GPU; running eager steps");
                args.graphs = false;
            }
            Gpu::interpreter()
        }
        Err(e) => return Err(e),
    };
    let cfg = if matches!(args.shape, ShapeArg::Tiny) { Config::TINY } else { Config::TNP };
    let shape = args.shape.shape();
    let (used_before, _) = used(&gpu)?;
    let mut model = TransformerNp::new(&gpu, cfg, shape, args.checkpoint, AdamW::default(), args.seed)?;
    let mut data = GpData::new(args.seed.wrapping_add(1), shape.batch, shape.context, shape.targets);
    println!(
        "TransformerNP {cfg:?}, {} parameters, on {}; B = {}, (M, N) = ({}, {}), {} tokens a step; graphs {}, checkpointing {}; {:.2} GB of buffers",
        model.params.count(),
        gpu.name(),
        shape.batch,
        shape.context,
        shape.targets,
        shape.tokens(),
        on(args.graphs),
        on(args.checkpoint),
        model.buffer_bytes() as f64 / 1e9
    );
    if let Some(dir) = &args.dump {
        model.load_batch(&gpu, &data.next_batch())?;
        return dump(&gpu, &mut model, dir);
    }

    let mut graph = None;
    let mut times = Vec::new();
    let mut losses = Vec::new();
    let mut peak = 0usize;
    for step in 1..=args.steps {
        let batch = data.next_batch();
        model.load_batch(&gpu, &batch)?;
        let (start, end) = gpu.event_pair()?;
        let wall = Instant::now();
        gpu.record(&start)?;
        match &graph {
            Some(g) => model.step_graph(&gpu, g)?,
            None => model.step(&gpu)?,
        }
        gpu.record(&end)?;
        let loss = model.read_loss(&gpu)?;
        let ms = if gpu.is_interpreter() { wall.elapsed().as_secs_f32() * 1e3 } else { start.elapsed_ms(&end)? };
        if !loss.is_finite() {
            return Err(Error::Invalid(format!("step {step}: the loss is {loss}")));
        }
        peak = peak.max(used(&gpu)?.0.saturating_sub(used_before));
        // The first step loads kernels and makes tensor maps: capture after it.
        if args.graphs && graph.is_none() {
            graph = Some(model.capture(&gpu)?);
        }
        times.push(ms);
        losses.push(loss);
        if step % args.every.max(1) == 0 || step == args.steps {
            println!("step {step:>5}  loss {loss:>9.4}  {ms:>9.2} ms  {:>12.0} tokens/s", shape.tokens() as f64 / (ms as f64 / 1e3));
        }
    }
    // The first steps load kernels (and capture the graph): leave them out.
    let steady: Vec<f32> = times.iter().skip(2.min(times.len().saturating_sub(1))).cloned().collect();
    let med = median(&steady);
    println!(
        "summary: {} steps, median step {med:.2} ms, {:.0} tokens/s, loss {:.4} → {:.4}, device memory in use {:.2} GB",
        times.len(),
        shape.tokens() as f64 / (med as f64 / 1e3),
        losses.first().copied().unwrap_or(f32::NAN),
        losses.last().copied().unwrap_or(f32::NAN),
        peak as f64 / 1e9
    );
    let (flops, attn_flops) = model.flops();
    println!(
        "floor: {:.2} TFLOP a step ({:.0} % attention) / {PEAK_TFLOPS} TFLOP/s = {:.2} ms, {:.0} % of the median step ({:.0} TFLOP/s achieved)",
        flops / 1e12,
        100.0 * attn_flops / flops,
        flops / PEAK_TFLOPS / 1e9,
        100.0 * flops / PEAK_TFLOPS / 1e9 / med as f64,
        flops / (med as f64 / 1e3) / 1e12
    );
    if args.profile && !gpu.is_interpreter() {
        profile(&gpu, &mut model)?;
    }
    Ok(())
}

/// H100 SXM's dense bf16 tensor-core peak (the datasheet's), for the floor.
const PEAK_TFLOPS: f64 = 989.0;

/// One eager step with every launch timed apart: the kernels by time, and
/// attention's share.
fn profile(gpu: &Gpu, model: &mut TransformerNp) -> Result<()> {
    gpu.profile(true)?;
    model.step(gpu)?;
    let rows = gpu.profile_report()?;
    gpu.profile(false)?;
    let total: f64 = rows.iter().map(|r| r.2).sum();
    let attention: f64 = rows.iter().filter(|r| r.0.starts_with("attention_")).map(|r| r.2).sum();
    println!("profile of one eager step: {total:.2} ms in {} launches; attention {attention:.2} ms ({:.0} %), the rest {:.2} ms", rows.iter().map(|r| r.1).sum::<usize>(), 100.0 * attention / total, total - attention);
    for (name, n, ms) in rows.iter().take(30) {
        println!("  {ms:>9.3} ms {:>5.1} %  {n:>4}×  {name}", 100.0 * ms / total);
    }
    Ok(())
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Device memory in use now (total − free), 0 on the interpreter.
fn used(gpu: &Gpu) -> Result<(usize, usize)> {
    let (free, total) = gpu.mem_info()?;
    Ok((total - free, total))
}

fn median(v: &[f32]) -> f32 {
    let mut v = v.to_vec();
    v.sort_by(f32::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f32::NAN)
}

/// One forward and backward on the loaded batch, written out for the
/// PyTorch comparison: `model.json` (sizes, parameter names and shapes,
/// the loss), `params.f32`, `grads.f32` (in the same order, little-endian),
/// `tokens.f32`, `y.f32`.
fn dump(gpu: &Gpu, model: &mut TransformerNp, dir: &std::path::Path) -> Result<()> {
    let io = |e: std::io::Error| Error::Invalid(format!("writing {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let params = model.params.download(gpu)?;
    model.forward(gpu)?;
    model.backward(gpu)?;
    let loss = model.read_loss(gpu)?;
    let grads = model.params.download_grads(gpu)?;
    let (tokens, y) = model.inputs(gpu)?;
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let all = |vs: Vec<&[f32]>| vs.into_iter().flat_map(bytes).collect::<Vec<u8>>();
    std::fs::write(dir.join("params.f32"), all(params.iter().map(|p| &p.2[..]).collect())).map_err(io)?;
    std::fs::write(dir.join("grads.f32"), all(grads.iter().map(|g| &g.1[..]).collect())).map_err(io)?;
    std::fs::write(dir.join("tokens.f32"), bytes(&tokens)).map_err(io)?;
    std::fs::write(dir.join("y.f32"), bytes(&y)).map_err(io)?;
    let (cfg, shape) = (model.cfg, model.shape);
    let manifest = serde_json::json!({
        "layers": cfg.layers, "d_model": cfg.d_model, "heads": cfg.heads, "d_ff": cfg.d_ff, "components": cfg.components,
        "batch": shape.batch, "context": shape.context, "targets": shape.targets, "eps": 1e-5,
        "loss": loss,
        "params": params.iter().map(|(n, s, _)| serde_json::json!({"name": n, "shape": s})).collect::<Vec<_>>(),
    });
    std::fs::write(dir.join("model.json"), serde_json::to_string_pretty(&manifest).unwrap()).map_err(io)?;
    println!("wrote one step's loss ({loss:.5}), parameters and gradients to {}", dir.display());
    Ok(())
}
