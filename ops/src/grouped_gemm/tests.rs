//! CPU-interpreter checks of the grouped forms against float64, at odd
//! sizes: hidden widths that are not multiples of 8 (the padded stride) and
//! of no tile, one output per head, and a single head.
use super::*;
use crate::gemm::Act;
use crate::reference;
use crate::testing::*;
use rustile::bf16;

#[test]
fn heads_mlp_matches_float64() {
    for dims in [[37, 64, 10, 91, 3], [5, 24, 1, 13, 1], [70, 40, 3, 1365, 2]] {
        let (mut rng, seed) = rng();
        let [x, w1, b1, w2, b2] = heads_inputs::<bf16>(&mut rng, dims);
        let round = |v: f64| bf16::from_f32(v as f32).to_f32() as f64;
        let want = reference::heads_mlp(&wide(&x), &wide(&w1), &wide(&b1), Act::GeluTanh, &wide(&w2), &wide(&b2), dims, round);
        let got = heads_mlp_cpu(&x, &w1, &b1, Act::GeluTanh, &w2, &b2, dims);
        assert_close(&got, &want, &format!("heads_mlp {dims:?} (seed {seed})"));
    }
}

#[test]
fn the_padded_hidden_stride_keeps_every_head_aligned() {
    let (first, second, hp) = heads_plans(100, 512, 10, 1365, 3);
    assert_eq!(hp, 1368);
    // Head g's hidden slice starts g·1368 elements into a row of 10·1368: 16-byte aligned in bf16.
    assert_eq!((first.ld[2] * 2) % 16, 0);
    assert_eq!((first.stride[2] * 2) % 16, 0);
    assert_eq!((second.ld[0], second.stride[0]), (first.ld[2], first.stride[2]), "layer 2 reads what layer 1 wrote");
    // Layer 1 writes no further than hp·G per row, layer 2 reads only h of each slice.
    assert_eq!((first.n, second.k), (1365, 1365));
    // The padded bias and second weights: every head's chunks aligned, and
    // both layers readable by the copy engine.
    assert_eq!((first.stride[3] * 2) % 16, 0);
    assert!(first.tma_ready() && second.tma_ready(), "{first:?} {second:?}");
}
