//! CPU-interpreter checks of the MLP blocks against float64, at d_ff = 1365
//! (not a multiple of 8 or of any tile) and at small odd sizes.
use super::*;
use crate::gemm::{Act, Epi};
use crate::reference;
use crate::testing::*;
use rustile::bf16;

/// float64 `act(x·w1ᵀ)`, rounded to bf16 as the GPU stores the hidden activations, then `·w2ᵀ`.
fn reference_mlp(hidden: Vec<f64>, w2: &[bf16], rows: usize, d_model: usize, d_ff: usize) -> Vec<f64> {
    let rounded: Vec<f64> = hidden.iter().map(|&h| bf16::from_f64(h).to_f64()).collect();
    reference::matmul_nt(&rounded, &wide(w2), rows, d_model, d_ff)
}

#[test]
fn mlp_matches_float64() {
    for (rows, d_model, d_ff) in [(1, 8, 5), (37, 64, 91), (19, 512, 1365)] {
        let (mut rng, seed) = rng();
        let x: Vec<bf16> = normal(&mut rng, rows * d_model, 0.0, 1.0);
        let w1: Vec<bf16> = normal(&mut rng, d_ff * d_model, 0.0, 1.0 / (d_model as f32).sqrt());
        let w2: Vec<bf16> = normal(&mut rng, d_model * d_ff, 0.0, 1.0 / (d_ff as f32).sqrt());
        let pre = reference::matmul_nt(&wide(&x), &wide(&w1), rows, d_ff, d_model);
        for act in [Act::Silu, Act::GeluTanh] {
            let e = Epi { act, ..Epi::NONE };
            let hidden = pre.iter().map(|&h| reference::epilogue(&e, h, 0.0, 0.0, 0.0)).collect();
            let want = reference_mlp(hidden, &w2, rows, d_model, d_ff);
            let got = mlp_cpu(&x, &w1, act, &w2, rows, d_model, d_ff);
            assert_close(&got, &want, &format!("mlp {act:?} {rows}×{d_model}→{d_ff} (seed {seed})"));
        }
        let w3: Vec<bf16> = normal(&mut rng, d_ff * d_model, 0.0, 1.0 / (d_model as f32).sqrt());
        let up = reference::matmul_nt(&wide(&x), &wide(&w3), rows, d_ff, d_model);
        let want = reference_mlp(reference::swiglu(&pre, &up), &w2, rows, d_model, d_ff);
        let got = gated_mlp_cpu(&x, &w1, &w3, &w2, rows, d_model, d_ff);
        assert_close(&got, &want, &format!("gated mlp {rows}×{d_model}→{d_ff} (seed {seed})"));
    }
}

/// The host API on the interpreter (hidden rows padded where d_ff is not a
/// multiple of 8, not where it is) gives the same values as the kernels
/// run without padding, and refuses the SiLU's backward as an activation.
#[test]
fn host_api_pads_the_hidden_rows_without_changing_a_value() {
    let gpu = rustile_host::Gpu::interpreter();
    for (rows, d_model, d_ff) in [(37, 64, 91), (9, 24, 48)] {
        let (mut rng, seed) = rng();
        let x: Vec<bf16> = normal(&mut rng, rows * d_model, 0.0, 1.0);
        let w: Vec<Vec<bf16>> = (0..2).map(|_| normal(&mut rng, d_ff * d_model, 0.0, 1.0 / (d_model as f32).sqrt())).collect();
        let w2: Vec<bf16> = normal(&mut rng, d_model * d_ff, 0.0, 1.0 / (d_ff as f32).sqrt());
        let up = |v: &[bf16], shape: &[usize]| gpu.upload(v, shape).unwrap();
        let (tx, tw1, tw3, tw2) = (up(&x, &[rows, d_model]), up(&w[0], &[d_ff, d_model]), up(&w[1], &[d_ff, d_model]), up(&w2, &[d_model, d_ff]));
        let mut y = gpu.alloc::<bf16>(&[rows, d_model]).unwrap();
        let what = format!("{rows}×{d_model}→{d_ff} (seed {seed})");
        mlp(&gpu, &tx, &tw1, Act::Silu, &tw2, &mut y).unwrap();
        assert_eq!(gpu.download(&y).unwrap(), mlp_cpu(&x, &w[0], Act::Silu, &w2, rows, d_model, d_ff), "mlp {what}");
        gated_mlp(&gpu, &tx, &tw1, &tw3, &tw2, &mut y).unwrap();
        assert_eq!(gpu.download(&y).unwrap(), gated_mlp_cpu(&x, &w[0], &w[1], &w2, rows, d_model, d_ff), "gated mlp {what}");
        let err = mlp(&gpu, &tx, &tw1, Act::SiluGrad, &tw2, &mut y).unwrap_err();
        assert!(err.to_string().contains("not an activation"), "{err}");
    }
}
