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
