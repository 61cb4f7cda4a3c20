//! Row softmax through the public API: on the GPU when there is one, else in
//! the CPU interpreter. `cargo run --example softmax -p rustile-ops`
use rustile::bf16;
use rustile_ops::softmax::{softmax, softmax_cpu};
use rustile_ops::testing::{normal, rng};

fn main() {
    let (rows, cols) = (4, 3000);
    let (mut rng, _) = rng();
    let x: Vec<bf16> = normal(&mut rng, rows * cols, 0.0, 1.0);
    let y = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            let dx = gpu.upload(&x, &[rows, cols]).unwrap();
            let mut dy = gpu.alloc::<bf16>(&[rows, cols]).unwrap();
            softmax(&gpu, &dx, &mut dy).unwrap();
            println!("ran on {}", gpu.name());
            gpu.download(&dy).unwrap()
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            softmax_cpu(&x, rows, cols)
        }
    };
    for r in 0..rows {
        let row = &y[r * cols..(r + 1) * cols];
        let sum: f32 = row.iter().map(|v| v.to_f32()).sum();
        println!("row {r}: max p = {:.4}, Σp = {sum:.4}", row.iter().map(|v| v.to_f32()).fold(0.0, f32::max));
    }
}
