//! AlphaFold3's outgoing triangle multiplicative update on a 96 × 96 pair
//! representation of 128 channels (hidden 128), with a mask: `TriMul::new`
//! prepares the weights once, `forward` runs the update. On the GPU when
//! there is one, else in the CPU interpreter, checked against float64
//! (elementwise, rtol = atol = 2e-2) either way.
//! `cargo run --release --example trimul -p rustile-ops`
use rustile_ops::testing::{allclose_ratio, rng, TriMulCase};
use rustile_ops::trimul::{trimul_cpu, Dims, Params, TriMul};

fn main() {
    let dims = Dims { batch: 1, n: 96, dim: 128, hidden: 128 };
    let (mut rng, _) = rng();
    // x [1, 96, 96, 128] ~ N(0, 1), a 0/1 mask [1, 96, 96], fresh parameters (fp32).
    let case = TriMulCase::new(&mut rng, dims, false, true);
    let out = match rustile_host::Gpu::new() {
        Ok(gpu) => {
            // The parameters as fp32 tensors of their module shapes; TriMul::new prepares them once.
            let shapes = Params::<()>::shapes(dims.dim, dims.hidden);
            let params: Vec<_> = case.params.iter().zip(&shapes).map(|(p, s)| gpu.upload(p, s).unwrap()).collect();
            let tm = TriMul::new(&gpu, &Params::from_fields(std::array::from_fn(|i| &params[i])), dims.dim, dims.hidden).unwrap();
            let x = gpu.upload(&case.x, &[1, 96, 96, 128]).unwrap();
            let mask = gpu.upload(case.mask.as_ref().unwrap(), &[1, 96, 96]).unwrap();
            let out = tm.forward(&gpu, &x, Some(&mask)).unwrap();
            println!("ran on {}", gpu.name());
            gpu.download(&out).unwrap()
        }
        Err(e) => {
            println!("{e}\nrunning the CPU interpreter instead");
            trimul_cpu(&case.x, case.mask.as_deref(), &case.params(|v| v.as_slice()), dims)
        }
    };
    let worst = allclose_ratio(&out, &case.want(), 2e-2, 2e-2);
    println!("out is [1, 96, 96, 128]; worst element at {worst:.2} of the tolerance (rtol = atol = 2e-2)");
    assert!(worst <= 1.0, "outside the tolerance");
}
