//! QuasarAttention, the layer: a forward and a backward of the seed's layer
//! (hidden 512, 8 heads of 64) over 4096 tokens on the GPU, or of a small
//! one (hidden 128, 2 heads) over 300 tokens in the CPU interpreter when
//! there is no GPU; then one AdamW step on the gradients, and the forward
//! for inference (`infer`, nothing kept for a backward) with the new weights.
//! `cargo run --release --example quasar -p rustile-train`
use rustile::bf16;
use rustile_host::Gpu;
use rustile_ops::testing::{normal, rng};
use rustile_train::quasar::{Config, Quasar};

fn main() {
    let (gpu, cfg, tokens) = match Gpu::new() {
        Ok(gpu) => (gpu, Config::SEED, 4096),
        Err(e) => {
            println!("{e}\nrunning a small layer in the CPU interpreter instead");
            (Gpu::interpreter(), Config { hidden: 128, heads: 2, gate_rank: 16 }, 300)
        }
    };
    let (mut rng, seed) = rng();
    let mut layer = Quasar::new(&gpu, cfg, 1, tokens, seed).unwrap();
    let n = tokens * cfg.hidden;
    gpu.write(&mut layer.x, &normal::<bf16>(&mut rng, n, 0.0, 1.0)).unwrap();
    layer.forward(&gpu).unwrap();
    let out = gpu.download(&layer.out).unwrap();
    let rms = (out.iter().map(|v| (v.to_f32() as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
    println!("ran on {}: {cfg:?}, {tokens} tokens; out [1, {tokens}, {}] has rms {rms:.3}", gpu.name(), cfg.hidden);
    // The gradient of ⟨d_out, out⟩ for a random d_out, then one optimizer step.
    gpu.write(&mut layer.d_out, &normal::<bf16>(&mut rng, n, 0.0, 1.0)).unwrap();
    layer.backward(&gpu).unwrap();
    for p in &layer.params.params {
        let g = gpu.download(&p.grad).unwrap();
        println!("  d{:<9} {:?}: norm {:.3e}", p.name, p.w.shape(), g.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt());
    }
    layer.params.begin_step(&gpu).unwrap();
    layer.params.update(&gpu).unwrap();
    println!("one AdamW step taken ({} parameters)", layer.params.count());
    layer.infer(&gpu).unwrap();
    let out = gpu.download(&layer.out).unwrap();
    let rms = (out.iter().map(|v| (v.to_f32() as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
    println!("inference forward after the step: out has rms {rms:.3}");
}
