//! A neural process's attention: 300 context points and 45 targets (one
//! sequence of 345 queries) attend only to the context's keys and values,
//! 8 heads of 72, no mask in memory (`Attention::keys`). On the GPU when
//! there is one, else in the CPU interpreter, checked against float64 either way.
//! `cargo run --release --example attention -p rustile-ops`
use rustile::bf16;
use rustile_ops::attention::{attention, attention_cpu, Attention, Dims};
use rustile_ops::reference;
use rustile_ops::testing::{normal, rel_err, rng, wide};

fn main() {
    let (context, targets, heads, d) = (300, 45, 8, 72);
    let dims = Dims { batch: 1, sq: context + targets, sk: context + targets, heads, kv_heads: heads, d };
    let opt = Attention::default().keys(context);
    let (mut rng, _) = rng();
    let n = (context + targets) * heads * d;
    // Token-major, as the projections write them: [batch, tokens, heads, d].
    let (q, k, v): (Vec<bf16>, Vec<bf16>, Vec<bf16>) = (normal(&mut rng, n, 0.0, 1.0), normal(&mut rng, n, 0.0, 1.0), normal(&mut rng, n, 0.0, 1.0));
    let o = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            let shape = [1, context + targets, heads, d];
            let up = |x: &[bf16]| gpu.upload(x, &shape).unwrap();
            let (mut o, mut lse) = (gpu.alloc::<bf16>(&shape).unwrap(), gpu.alloc::<f32>(&[1, heads, context + targets]).unwrap());
            attention(&gpu, &up(&q), &up(&k), &up(&v), &mut o, &mut lse, opt).unwrap();
            println!("ran on {}", gpu.name());
            gpu.download(&o).unwrap()
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            attention_cpu(&q, &k, &v, dims, opt).0
        }
    };
    let seqs = [(0, context + targets, 0, context)];
    let want = reference::attention(&wide(&q), &wide(&k), &wide(&v), &seqs, [heads, heads, d], 1.0 / (d as f64).sqrt(), false).0;
    println!("o is [1, {}, {heads}, {d}]; relative error against float64: {:.2e}", context + targets, rel_err(&o, &want));
}
