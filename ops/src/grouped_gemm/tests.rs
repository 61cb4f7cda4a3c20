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
    // The last two: heads without hidden units (y is b2) and without inputs (the first layer is act(b1)).
    for dims in [[37, 64, 10, 91, 3], [5, 24, 1, 13, 1], [70, 40, 3, 1365, 2], [7, 16, 3, 0, 5], [9, 0, 2, 20, 3]] {
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

/// Groups of different sizes, packed: odd M, N and K, a group without rows,
/// one with K = 0 (its C is zeros), every config of both kernels.
#[test]
fn gemm_groups_match_float64() {
    use crate::gemm::Config;
    let sizes = [[37, 45, 70], [0, 16, 8], [1, 130, 33], [129, 7, 0], [200, 64, 136], [5, 5, 5]];
    let (mut rng, seed) = rng();
    let at = packed_offsets(&sizes);
    let [la, lb, lc] = at[sizes.len()];
    let a: Vec<bf16> = normal(&mut rng, la, 0.0, 1.0);
    let b: Vec<bf16> = normal(&mut rng, lb, 0.0, 1.0);
    let mut want = Vec::with_capacity(lc);
    for (&[m, n, k], &[oa, ob, _]) in sizes.iter().zip(&at) {
        want.extend(reference::matmul_nt(&wide(&a[oa..oa + m * k]), &wide(&b[ob..ob + n * k]), m, n, k));
    }
    let mma = (0..grouped_gemm_kernel::CONFIGS.len()).map(Config::Mma);
    for cfg in mma.chain((0..grouped_gemm_wgmma_kernel::CONFIGS.len()).map(Config::Wgmma)) {
        let mut c = poisoned::<bf16>(lc);
        gemm_groups_cpu(cfg, &sizes, &a, &b, &mut c);
        assert_close(&c, &want, &format!("gemm_groups {sizes:?} {cfg:?} (seed {seed})"));
    }
}

/// The table: sizes, each group's first block (groups without blocks share
/// the next one's), and 64-bit offsets into the packed tensors.
#[test]
fn the_group_table_numbers_blocks_group_after_group() {
    let (table, blocks) = group_table(&[[100, 300, 8], [0, 64, 8], [1, 1, 1]], [64, 128]).unwrap();
    assert_eq!(blocks, 2 * 3 + 0 + 1);
    assert_eq!(table.len(), 3 * WORDS);
    assert_eq!(&table[..4], &[100, 300, 8, 0]);
    assert_eq!(&table[WORDS..WORDS + 10], &[0, 64, 8, 6, 800, 0, 2400, 0, 30000, 0]);
    assert_eq!(table[2 * WORDS + 3], 6, "after a group without blocks");
    assert!(group_table(&[[1 << 32, 1, 1]], [64, 64]).unwrap_err().to_string().contains("32 bits"));
}
