//! A mixture of experts' up-projection: tokens sorted by expert, each
//! expert's rows against its own weights, all in one launch of the grouped
//! GEMM (`gemm_groups`): on the GPU when there is one, else in the CPU
//! interpreter, checked against float64 either way.
//! `cargo run --release --example experts -p rustile-ops`
use rustile::bf16;
use rustile_ops::gemm::Config;
use rustile_ops::grouped_gemm::{gemm_groups, gemm_groups_cpu, Groups};
use rustile_ops::reference;
use rustile_ops::testing::{normal, rel_err, rng, wide};

fn main() {
    // Four experts of 256 → 512 that got 37, 0, 101 and 12 tokens.
    let sizes: Vec<[usize; 3]> = [37, 0, 101, 12].iter().map(|&m| [m, 512, 256]).collect();
    let (mut rng, _) = rng();
    let rows: usize = sizes.iter().map(|s| s[0]).sum();
    let x: Vec<bf16> = normal(&mut rng, rows * 256, 0.0, 1.0); // [tokens, 256], sorted by expert
    let w: Vec<bf16> = normal(&mut rng, sizes.len() * 512 * 256, 0.0, 0.1); // [experts, 512, 256]
    let y = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            let groups = Groups::new(&gpu, &sizes).unwrap();
            let (dx, dw) = (gpu.upload(&x, &[rows, 256]).unwrap(), gpu.upload(&w, &[sizes.len(), 512, 256]).unwrap());
            let mut dy = gpu.alloc::<bf16>(&[rows, 512]).unwrap();
            gemm_groups(&gpu, &groups, &dx, &dw, &mut dy).unwrap();
            println!("ran on {}", gpu.name());
            gpu.download(&dy).unwrap()
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            let mut y = vec![bf16::ZERO; rows * 512];
            gemm_groups_cpu(Config::Mma(0), &sizes, &x, &w, &mut y);
            y
        }
    };
    // Expert e's tokens start where the previous experts' end; its weights are w[e].
    let mut want = Vec::new();
    let mut first = 0;
    for (e, &[m, n, k]) in sizes.iter().enumerate() {
        want.extend(reference::matmul_nt(&wide(&x[first * k..(first + m) * k]), &wide(&w[e * n * k..(e + 1) * n * k]), m, n, k));
        first += m;
    }
    println!("y is [{rows}, 512]; relative error against float64: {:.2e}", rel_err(&y, &want));
}
