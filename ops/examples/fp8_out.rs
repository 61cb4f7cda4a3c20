//! A linear layer whose output feeds an FP8 GEMM: `y8 = e4m3(s·gelu(x·wᵀ + b))`
//! written by the GEMM's epilogue, with the amax from which the next step's
//! scale `s` comes (delayed scaling). On a Hopper GPU when there is one, else
//! in the CPU interpreter; checked against float64 either way.
//! `cargo run --release --example fp8_out -p rustile-ops`
use rustile::{bf16, F8E4M3};
use rustile_ops::gemm::{gemm_cast, launch_plan_cast_cpu, Act, Bias, Cast, Config, Epi, Epilogue, Plan, Transpose};
use rustile_ops::reference;
use rustile_ops::testing::{assert_e4m3_close, normal, rng, wide};

fn main() {
    let (m, n, k) = (200, 136, 512);
    let (mut rng, _) = rng();
    let x: Vec<bf16> = normal(&mut rng, m * k, 0.0, 1.0);
    let w: Vec<bf16> = normal(&mut rng, n * k, 0.0, 1.0 / (k as f32).sqrt());
    let b: Vec<bf16> = normal(&mut rng, n, 0.0, 1.0);
    // Last step's amax said the values reach about 4: map that to e4m3's 448.
    let s = 448.0 / 4.0;
    let epi = Epi { bias: Bias::PerColumn, act: Act::GeluTanh, ..Epi::NONE };
    let hopper = rustile_host::Gpu::new().ok().filter(|gpu| rustile_ops::gemm::gemm_tma_kernel::supported(gpu));
    let (y8, amax) = match hopper {
        Some(gpu) => {
            let (dx, dw, db) = (gpu.upload(&x, &[m, k]).unwrap(), gpu.upload(&w, &[n, k]).unwrap(), gpu.upload(&b, &[n]).unwrap());
            let (ds, mut damax) = (gpu.upload(&[s], &[1]).unwrap(), gpu.upload(&[0.0f32], &[1]).unwrap());
            let mut dy8 = gpu.alloc::<F8E4M3>(&[m, n]).unwrap();
            let e = Epilogue::new().bias_per_column(&db).act(Act::GeluTanh);
            gemm_cast(&gpu, &dx, dw.t(), &mut dy8, &e, Cast { scale: Some(&ds), amax: Some(&mut damax) }).unwrap();
            println!("ran on {}", gpu.name());
            (gpu.download(&dy8).unwrap(), gpu.download(&damax).unwrap()[0])
        }
        None => {
            println!("no Hopper GPU: running the CPU interpreter instead");
            let (mut y8, mut amax) = (vec![F8E4M3(0); m * n], [0.0f32]);
            launch_plan_cast_cpu(Config::Tma(0), &Plan::nt(m, n, k), [&x, &w, &b, &[]], &mut y8, epi, &[s], &mut amax);
            (y8, amax[0])
        }
    };
    let ab = reference::matmul_nt(&wide(&x), &wide(&w), m, n, k);
    let y: Vec<f64> = (0..m * n).map(|i| reference::epilogue(&epi, ab[i], b[i % n].to_f32() as f64, 0.0, 0.0)).collect();
    assert_e4m3_close(&y8, &y.iter().map(|v| s as f64 * v).collect::<Vec<_>>(), "y8");
    let top = y.iter().fold(0.0f64, |t, v| t.max(v.abs()));
    println!("y8 is e4m3 [{m}, {n}], every element the float64 value rounded to e4m3 (saturating at 448)");
    println!("amax {amax} (float64: {top:.6}): next step's scale would be {:.2}", 448.0 / amax);
}
