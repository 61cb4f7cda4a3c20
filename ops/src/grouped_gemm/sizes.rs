//! Groups of different sizes in one launch: group `g` is `c_g = a_g·b_gᵀ`
//! with its own `m`, `n` and `k` (a mixture of experts' tokens per expert,
//! a batch of unequal products). The operands are packed: `a` holds every
//! `a_g` (`[m_g, k_g]`, row-major) back to back, `b` every `b_g` (`[n_g,
//! k_g]`, a linear layer's weight), `c` every `c_g` (`[m_g, n_g]`).
//!
//! The grid is every group's `BM×BN` blocks, numbered group after group. A
//! program finds its group by a binary search over the groups' first block
//! numbers in a table the host built (`Ptr<u32>`, [`WORDS`] words a group),
//! then runs the plain GEMM's main loop on that group's windows: `mma.sync`
//! anywhere, `wgmma` on Hopper.
use crate::gemm::{mainloop, Operand};
// The `wgmma` kernel is built for sm_90a (and the interpreter) only.
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
use crate::gemm::{mainloop_wgmma, pad};
use rustile::prelude::*;

/// Words a group takes in the table: `m`, `n`, `k`, its first block, then
/// the element offsets of `a_g`, `b_g` and `c_g` in the packed tensors (64
/// bits each, low word first).
pub const WORDS: usize = 10;

/// One group's row of the table.
struct Group {
    mnk: [usize; 3],
    first: usize,
    offsets: [usize; 3],
}

/// The group program `program_id(0)` computes a block of, and the block's
/// `[row, col]` there (in the plain GEMM's banded order).
#[inline(always)]
fn locate<const BM: usize, const BN: usize>(table: Ptr<u32>, groups: usize) -> (Group, [usize; 2]) {
    let pid = program_id(0);
    let first = |g: usize| table.read(g * WORDS + 3) as usize;
    // The last group whose first block is at most pid (groups without
    // blocks share their successor's first block, so this one has pid).
    let (mut lo, mut hi) = (0, groups);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if first(mid) <= pid { lo = mid } else { hi = mid }
    }
    let word = |i: usize| table.read(lo * WORDS + i) as usize;
    let wide = |i: usize| word(i) | word(i + 1) << 32;
    let g = Group { mnk: [word(0), word(1), word(2)], first: word(3), offsets: [wide(4), wide(6), wide(8)] };
    let [bm, bn] = grouped(pid - g.first, cdiv(g.mnk[0], BM), cdiv(g.mnk[1], BN), 16);
    (g, [bm * BM, bn * BN])
}

/// The group's A and B as the main loops take them.
#[inline(always)]
fn operands<T: Elem>(g: &Group, a: Ptr<T>, b: Ptr<T>) -> (Operand<T>, Operand<T>) {
    let k = g.mnk[2];
    (Operand { ptr: a.offset(g.offsets[0]), ld: k }, Operand { ptr: b.offset(g.offsets[1]), ld: k })
}

crate::gemm_kernel! {
    grid = [blocks],
    /// Every group's `c_g = a_g·b_gᵀ` on `mma.sync`: `table` as [`WORDS`]
    /// says, `blocks` the programs (every group's `BM×BN` blocks).
    pub fn grouped_gemm_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, table: Ptr<u32>, groups: usize, blocks: usize) {
        let _ = blocks; // the grid
        let (g, at) = locate::<BM, BN>(table, groups);
        let [m, n, k] = g.mnk;
        let (a, b) = operands(&g, a, b);
        let acc = mainloop::<T, BM, BN, BK, STAGES, THREADS, false, true>(a, b, m, n, k, at);
        store_acc(&BlockPtr::rows(c.offset(g.offsets[2]), m, n, at), &acc);
    }
}

// `SMEM = pad(32·WARPS) + STAGES·(BM + BN)·BK·2` (`gemm_wgmma_kernel`'s first two).
#[kernel(
    configs = [
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 6, SMEM = 196608),
        (BM = 64, BN = 128, BK = 64, WARPS = 4, STAGES = 6, SMEM = 147968),
    ],
    grid = [blocks],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
/// [`grouped_gemm_kernel`] on Hopper's `wgmma`, the same arguments.
pub fn grouped_gemm_wgmma_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, table: Ptr<u32>, groups: usize, blocks: usize) {
    let _ = blocks; // the grid
    let (g, at) = locate::<BM, BN>(table, groups);
    let [m, n, k] = g.mnk;
    let (a, b) = operands(&g, a, b);
    let acc = mainloop_wgmma::<T, BM, BN, BK, STAGES, THREADS>(a, b, m, n, k, at);
    store_acc_staged(&BlockPtr::rows(c.offset(g.offsets[2]), m, n, at), &acc, pad(THREADS), |_, _, x: [f32; 8]| x);
}
