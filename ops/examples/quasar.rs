//! QuasarAttention's q (or k, v) path: the projection `x·Wᵀ`, then the causal
//! width-4 convolution with SiLU, as one kernel (`proj_conv_silu`; on Hopper
//! one launch, elsewhere the GEMM then `conv_silu`) and as the two steps,
//! on the GPU when there is one, else in the CPU interpreter. Then the
//! layer's end: the gate's second projection, the gated RMSNorm and the
//! output projection as one kernel (`gated_out_proj`) and as three steps.
//! `cargo run --release --example quasar -p rustile-ops`
use rustile::bf16;
use rustile_host::Gpu;
use rustile_ops::gemm::{gemm, Epilogue, Transpose};
use rustile_ops::quasar::{conv_silu, gated_out_proj, gated_rms_norm, proj_conv_silu, HEAD, WIDTH};
use rustile_ops::testing::{normal, rng};

fn main() {
    let gpu = Gpu::new().unwrap_or_else(|e| {
        println!("{e}\nrunning the CPU interpreter instead");
        Gpu::interpreter()
    });
    let (batch, tokens, hidden) = (2, 300, 128);
    let (mut rng, _) = rng();
    let x = gpu.upload(&normal::<bf16>(&mut rng, batch * tokens * hidden, 0.0, 1.0), &[batch, tokens, hidden]).unwrap();
    let wq = gpu.upload(&normal::<bf16>(&mut rng, hidden * hidden, 0.0, (hidden as f32).powf(-0.5)), &[hidden, hidden]).unwrap();
    let w = gpu.upload(&normal::<bf16>(&mut rng, WIDTH * hidden, 0.0, 0.5), &[WIDTH, hidden]).unwrap();
    // One call: `pre` (the projection) is kept for the backward, `q` is silu(conv(pre)).
    let (mut pre, mut q) = (gpu.alloc::<bf16>(&[batch, tokens, hidden]).unwrap(), gpu.alloc::<bf16>(&[batch, tokens, hidden]).unwrap());
    proj_conv_silu(&gpu, &x, &wq, &w, Some(&mut pre), &mut q).unwrap();
    // The same as two steps.
    let (pre2, mut q2) = (gpu.alloc::<bf16>(&[batch, tokens, hidden]).unwrap(), gpu.alloc::<bf16>(&[batch, tokens, hidden]).unwrap());
    let rows = batch * tokens;
    gemm(&gpu, &x.view(0, &[rows, hidden]).unwrap(), wq.t(), &mut pre2.view(0, &[rows, hidden]).unwrap(), &Epilogue::new()).unwrap();
    conv_silu(&gpu, &pre2, &w, &mut q2).unwrap();
    let (a, b) = (gpu.download(&q).unwrap(), gpu.download(&q2).unwrap());
    let diff = a.iter().zip(&b).map(|(x, y)| (x.to_f32() - y.to_f32()).abs()).fold(0.0, f32::max);
    println!("ran on {}: q [{batch}, {tokens}, {hidden}], one kernel against two steps: max |difference| {diff:.2e}", gpu.name());

    // out = (RMSNorm(o)·w ⊙ sigmoid(g1·Wg2ᵀ + b))·Woᵀ per head of 64; q stands in for o.
    let (heads, rank) = (hidden / HEAD, HEAD);
    let up = |rng: &mut _, shape: &[usize], std: f32| gpu.upload(&normal::<bf16>(rng, shape.iter().product(), 0.0, std), shape).unwrap();
    let g1 = up(&mut rng, &[rows, rank], 1.0);
    let (wg2, b, wo) = (up(&mut rng, &[hidden, rank], 0.125), up(&mut rng, &[hidden], 0.5), up(&mut rng, &[hidden, hidden], (hidden as f32).powf(-0.5)));
    let norm_w = gpu.upload(&vec![bf16::from_f32(1.0); HEAD], &[HEAD]).unwrap();
    let o = q.view(0, &[rows, hidden]).unwrap();
    let mut out = gpu.alloc::<bf16>(&[rows, hidden]).unwrap();
    gated_out_proj(&gpu, &o, &g1, &wg2, &b, &norm_w, &wo, 1e-5, &mut out).unwrap();
    // The same as three steps, which keep `g` and `y` (the backward reads them).
    let (mut g, mut y, mut out2) = (gpu.alloc::<bf16>(&[rows, hidden]).unwrap(), gpu.alloc::<bf16>(&[rows, hidden]).unwrap(), gpu.alloc::<bf16>(&[rows, hidden]).unwrap());
    let mut rstd = gpu.alloc::<f32>(&[heads, rows]).unwrap();
    gemm(&gpu, &g1, wg2.t(), &mut g, &Epilogue::new().bias_per_column(&b)).unwrap();
    gated_rms_norm(&gpu, &o, &g, &norm_w, 1e-5, &mut y, &mut rstd).unwrap();
    gemm(&gpu, &y, wo.t(), &mut out2, &Epilogue::new()).unwrap();
    let (a, b) = (gpu.download(&out).unwrap(), gpu.download(&out2).unwrap());
    let diff = a.iter().zip(&b).map(|(x, y)| (x.to_f32() - y.to_f32()).abs()).fold(0.0, f32::max);
    println!("out [{rows}, {hidden}] from {heads} heads, one kernel against three steps: max |difference| {diff:.2e}");
}
