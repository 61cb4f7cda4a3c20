//! QuasarAttention's layer ([`rustile_train::quasar`]) at the seed's shape:
//! B = 1, hidden 512, 8 heads of 64, `T` tokens. The forward as the seed's
//! script times it (tokens per second; inference, `Quasar::infer`), and the
//! forward and backward of a training step; no NaN or Inf at any length first. `torch_baselines.py`
//! runs the same layer in PyTorch around FLA's `chunk_delta_rule` (the
//! layer-equivalent: `nn.Linear`s, a depthwise causal `conv1d`, the gated
//! RMSNorm in torch ops; bf16 autocast as the seed's script runs it) at the
//! same lengths. Rows join by op `quasar` / `quasar_fwd_bwd` and shape `1xTx512`.
use crate::delta_rule::repeat;
use crate::harness::{measure, MeasureCfg, Row, RUSTILE};
use rustile::{bf16, Elem};
use rustile_host::{Error, Gpu, Result};
use rustile_ops::testing::{normal, rng};
use rustile_train::quasar::{Config, Quasar};

/// Random rows drawn per run; longer inputs repeat them (as the delta rule's bench).
const DRAWN: usize = 16_384;

/// Checks (finite) and times the layer at each length.
pub fn bench_quasar(gpu: &Gpu, cfg: &MeasureCfg, tokens: &[usize]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (mut rng, seed) = rng();
    let hidden = Config::SEED.hidden;
    let x: Vec<bf16> = normal(&mut rng, DRAWN * hidden, 0.0, 1.0);
    let dy: Vec<bf16> = normal(&mut rng, DRAWN * hidden, 0.0, 1.0);
    eprintln!("quasar: B = 1, hidden {hidden}, {} heads of 64 (seed {seed})", Config::SEED.heads);
    for &t in tokens {
        crate::harness::status(format!("quasar {t} tokens"));
        let shape = [1, t, hidden];
        let mut layer = Quasar::new(gpu, Config::SEED, 1, t, seed)?;
        gpu.write(&mut layer.x, &repeat(&x, t * hidden))?;
        gpu.write(&mut layer.d_out, &repeat(&dy, t * hidden))?;
        layer.forward(gpu)?;
        layer.backward(gpu)?;
        let finite = gpu.download(&layer.out)?.iter().chain(&gpu.download(&layer.dx)?).all(|v| v.to_f32().is_finite());
        if !finite {
            return Err(Error::Launch { kernel: "quasar".into(), msg: format!("a NaN or infinity in the layer's output or dx at T = {t} (seed {seed})") });
        }
        layer.infer(gpu)?;
        if !gpu.download(&layer.out)?.iter().all(|v| v.to_f32().is_finite()) {
            return Err(Error::Launch { kernel: "quasar".into(), msg: format!("a NaN or infinity in the inference forward's output at T = {t} (seed {seed})") });
        }
        // The forward as the seed times it (inference: nothing kept), and the
        // training forward, which keeps what the backward reads.
        let fwd = measure(gpu, cfg, || layer.infer(gpu))?;
        // The gate, gated norm and output projection in three steps instead of one kernel.
        layer.fused_out = false;
        let three_steps = measure(gpu, cfg, || layer.infer(gpu))?;
        layer.fused_out = true;
        let kept = measure(gpu, cfg, || layer.forward(gpu))?;
        let both = measure(gpu, cfg, || {
            layer.forward(gpu)?;
            layer.backward(gpu)
        })?;
        eprintln!(
            "quasar T = {t}: forward {:.3} ms ({:.2} M tokens/s; {:.3} ms keeping what the backward reads), forward+backward {:.3} ms ({:.2} M tokens/s); the layer's buffers {:.2} GB (activations and gradients for the backward); finite",
            fwd.median_ms,
            t as f64 / fwd.median_ms / 1e3,
            kept.median_ms,
            both.median_ms,
            t as f64 / both.median_ms / 1e3,
            layer.buffer_bytes() as f64 / 1e9,
        );
        eprintln!("quasar T = {t}: forward with the gate, gated norm and output projection in three steps (Quasar::fused_out off) {:.3} ms", three_steps.median_ms);
        // Where the time goes: one forward and one backward, each launch timed apart.
        for (what, backward, fused) in [("inference forward", false, true), ("inference forward in three steps", false, false), ("backward", true, true)] {
            layer.fused_out = fused;
            gpu.profile(true)?;
            if backward { layer.backward(gpu)? } else { layer.infer(gpu)? }
            let parts: Vec<String> = gpu
                .profile_report()?
                .iter()
                .map(|(name, n, ms)| format!("{}{} {ms:.3}", name.split("_kernel").next().unwrap_or(name), if *n > 1 { format!("×{n}") } else { String::new() }))
                .collect();
            gpu.profile(false)?;
            eprintln!("  the {what} by kernel (ms): {}", parts.join(", "));
        }
        rows.push(Row::new("quasar", &shape, bf16::NAME, RUSTILE, fwd));
        rows.push(Row::new("quasar_fwd_bwd", &shape, bf16::NAME, RUSTILE, both));
    }
    Ok(rows)
}
