//! Ten readout heads (512 → 1365 → 3, GELU) on one input through the
//! grouped GEMM: on the GPU when there is one, else in the CPU interpreter,
//! checked against float64 either way. `cargo run --example heads -p rustile-ops`
use rustile::bf16;
use rustile_ops::gemm::Act;
use rustile_ops::grouped_gemm::{heads_mlp, heads_mlp_cpu};
use rustile_ops::reference;
use rustile_ops::testing::{heads_inputs, rel_err, rng, wide};

fn main() {
    let dims @ [rows, d, g, h, out] = [64, 512, 10, 1365, 3];
    let (mut rng, _) = rng();
    let [x, w1, b1, w2, b2] = heads_inputs::<bf16>(&mut rng, dims);
    let y = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            let up = |v: &[bf16], shape: &[usize]| gpu.upload(v, shape).unwrap();
            let (dx, dw1, db1, dw2, db2) = (up(&x, &[rows, d]), up(&w1, &[g, h, d]), up(&b1, &[g, h]), up(&w2, &[g, out, h]), up(&b2, &[g, out]));
            let mut dy = gpu.alloc::<bf16>(&[rows, g, out]).unwrap();
            heads_mlp(&gpu, &dx, &dw1, Some(&db1), Act::GeluTanh, &dw2, Some(&db2), &mut dy).unwrap();
            println!("ran on {}", gpu.name());
            gpu.download(&dy).unwrap()
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            heads_mlp_cpu(&x, &w1, &b1, Act::GeluTanh, &w2, &b2, dims)
        }
    };
    let round = |v: f64| bf16::from_f32(v as f32).to_f32() as f64;
    let want = reference::heads_mlp(&wide(&x), &wide(&w1), &wide(&b1), Act::GeluTanh, &wide(&w2), &wide(&b2), dims, round);
    println!("y is [{rows}, {g}, {out}]; row 0, head 0: {:?}", &y[..out].iter().map(|v| v.to_f32()).collect::<Vec<_>>());
    println!("relative error against float64: {:.2e}", rel_err(&y, &want));
}
