//! A neural process's attention: 300 context points and 45 targets (one
//! sequence of 345 queries) attend only to the context's keys and values,
//! 8 heads of 72, no mask in memory (`Attention::keys`); then the gradients
//! of a loss `Σ o ⊙ d_o` (the targets' keys and values get none). On the
//! GPU when there is one, else in the CPU interpreter, checked against
//! float64 either way.
//! `cargo run --release --example attention -p rustile-ops`
use rustile::bf16;
use rustile_ops::attention::{attention, attention_backward, attention_backward_cpu, attention_cpu, Attention, Dims};
use rustile_ops::reference;
use rustile_ops::testing::{normal, rel_err, rng, wide};

fn main() {
    let (context, targets, heads, d) = (300, 45, 8, 72);
    let tokens = context + targets;
    let dims = Dims { batch: 1, sq: tokens, sk: tokens, heads, kv_heads: heads, d };
    let opt = Attention::default().keys(context);
    let (mut rng, _) = rng();
    let n = tokens * heads * d;
    // Token-major, as the projections write them: [batch, tokens, heads, d].
    let [q, k, v, d_o]: [Vec<bf16>; 4] = std::array::from_fn(|_| normal(&mut rng, n, 0.0, 1.0));
    let (o, [dq, dk, dv]) = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            let shape = [1, tokens, heads, d];
            let up = |x: &[bf16]| gpu.upload(x, &shape).unwrap();
            let (q, k, v, d_o) = (up(&q), up(&k), up(&v), up(&d_o));
            let (mut o, mut lse) = (gpu.alloc::<bf16>(&shape).unwrap(), gpu.alloc::<f32>(&[1, heads, tokens]).unwrap());
            attention(&gpu, &q, &k, &v, &mut o, &mut lse, opt).unwrap();
            let [mut dq, mut dk, mut dv] = std::array::from_fn(|_| gpu.alloc::<bf16>(&shape).unwrap());
            attention_backward(&gpu, [&q, &k, &v, &o, &d_o], &lse, [&mut dq, &mut dk, &mut dv], opt).unwrap();
            println!("ran on {}", gpu.name());
            let down = |t| gpu.download(t).unwrap();
            (down(&o), [down(&dq), down(&dk), down(&dv)])
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            let (o, lse) = attention_cpu(&q, &k, &v, dims, opt);
            let (dq, dk, dv) = attention_backward_cpu([&q, &k, &v, &o, &d_o], &lse, dims, opt);
            (o, [dq, dk, dv])
        }
    };
    let seqs = [(0, tokens, 0, context)];
    let (scale, shape) = (1.0 / (d as f64).sqrt(), [heads, heads, d]);
    let want = reference::attention(&wide(&q), &wide(&k), &wide(&v), &seqs, shape, scale, false).0;
    println!("o is [1, {tokens}, {heads}, {d}]; relative error against float64: {:.2e}", rel_err(&o, &want));
    let grads = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, shape, scale, false);
    for ((name, got), want) in ["dq", "dk", "dv"].into_iter().zip([dq, dk, dv]).zip(grads) {
        println!("{name}: relative error {:.2e}", rel_err(&got, &want));
    }
}
