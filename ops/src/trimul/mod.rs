//! TriMul: AlphaFold3's "outgoing" triangle multiplicative update.
//!
//! For a pair representation `x` `[B, N, N, dim]` (fp32) and a `mask`
//! `[B, N, N]`:
//!
//! ```text
//! x̂     = LayerNorm_dim(x)
//! left  = (x̂·W_lpᵀ) ⊙ mask ⊙ σ(x̂·W_lgᵀ)        right likewise (W_rp, W_rg)
//! t     = Σ_k left[b, i, k, :] ⊙ right[b, j, k, :]
//! out   = (LayerNorm_hidden(t) ⊙ σ(x̂·W_ogᵀ))·W_outᵀ
//! ```
//!
//! Three launches, each reading its inputs once:
//!
//! 1. The projection kernel: a program takes `BR` pairs, normalizes their
//!    rows of `x` into shared memory (bf16: the LayerNorm is the GEMM's
//!    prologue, `x̂` never goes to memory), then multiplies them by all five
//!    weights. It computes the products transposed, `W·x̂ᵀ`, so that each
//!    accumulator row is one hidden channel over consecutive pairs: left,
//!    right and the output gate leave as `[B, hidden, N·N]`, the layout the
//!    contraction wants, with no transpose anywhere. Two forms of one
//!    program: [`trimul_project_kernel`] on `mma.sync` (any GPU) and
//!    [`trimul_project_wgmma_kernel`] on Hopper, where the products run on
//!    the warpgroup tensor cores straight from shared memory, leave the
//!    registers to the accumulators, and two programs share an SM (one's
//!    LayerNorm loads under the other's products).
//! 2. The contraction is the batched GEMM `t[b, d] = left[b, d]·right[b, d]ᵀ`
//!    over `B·hidden` matrices of `N×N` ([`crate::gemm`]), t `[B, hidden, N·N]`.
//! 3. [`trimul_out_kernel`]: a program loads `[hidden, BP]` tiles of t and
//!    the gate (rows are channels, so each pair's LayerNorm is a column
//!    reduction), writes `u = LayerNorm(t) ⊙ gate` to shared memory and
//!    multiplies it by `W_out` there; out is fp32 `[B, N, N, dim]`.
//!
//! Storage is bf16 between the kernels, accumulation f32.
use rustile::mma::acc_len;
use rustile::prelude::*;

// ---- the projections' prologue and epilogue ------------------------------------------------

/// σ(x) with `rcp.approx` for its division: IEEE division's slow-path
/// branches, once per accumulator element, cost registers the epilogue
/// does not have at two programs an SM; an ulp of f32 is far under the
/// bf16 the result is stored in.
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    math::recip(1.0 + math::exp(-x))
}

/// The LayerNorm prologue of both projection kernels: rows `r0 .. r0+BR` of
/// `x` (`[pairs, dim]`, fp32) normalized into shared memory as bf16 tiles
/// `$tile(kt)` of `[BR, BK]`, one a k-step; columns past `dim` get weight
/// and bias 0, so they are 0. (A macro, not a function: it is written in
/// the calling kernel's tile types.)
macro_rules! normalize_rows {
    ($x:expr, [$pairs:expr, $dim:expr, $r0:expr], [$norm_w:expr, $norm_b:expr], $eps:expr, $tile:expr) => {{
        let (x, pairs, dim, r0) = ($x, $pairs, $dim, $r0);
        let steps = cdiv(dim, BK);
        let src = |kt: usize| BlockPtr::<f32, BR, BK>::rows(x, pairs, dim, [r0, kt * BK]);
        // Pass 1: each row's sums of d = x − x[·, 0] and d² (the shift keeps
        // E[d]² from cancelling E[d²] for rows far from 0). Each tile's loads
        // are issued before the previous tile is reduced.
        let shift = Col::load_column(&src(0), 0);
        let (mut sum, mut sum_sq) = (Col::splat(0.0), Col::splat(0.0));
        let mut next = load(&src(0));
        for kt in 0..steps {
            let cur = next;
            if kt + 1 < steps {
                next = load(&src(kt + 1));
            }
            let inside = Tile::<bool, BR, BK>::from_fn(|_, c| kt * BK + c < dim);
            let d = inside.select(cur - shift, Tile::zeros());
            let [s, q] = Tile::row_sums([d, d * d]);
            (sum, sum_sq) = (sum + s, sum_sq + q);
        }
        let dm = sum * (1.0 / dim as f32);
        let rstd = ((sum_sq * (1.0 / dim as f32) - dm * dm).max(Col::splat(0.0)) + $eps).rsqrt();
        let mean = shift + dm;
        // Pass 2 (the rows again, from L2): x̂ in bf16.
        let mut next = load(&src(0));
        for kt in 0..steps {
            let cur = next;
            if kt + 1 < steps {
                next = load(&src(kt + 1));
            }
            let (wt, bt) = (Row::<f32, BR, BK>::load($norm_w, kt * BK, dim), Row::<f32, BR, BK>::load($norm_b, kt * BK, dim));
            $tile(kt).store(&((cur - mean) * rstd * wt + bt).cast::<T>());
        }
    }};
}

/// Stores `p ⊙ σ(g)` (times the pairs' mask when `has_mask` is 1) at `dst`,
/// staged through shared memory at `scratch`. `masks` reads a chunk's 8
/// pairs of the mask for any channel (its row stride is 0).
#[inline(always)]
fn store_gated<T: Elem, const BH: usize, const BR: usize, const TH: usize, const WG: bool>(
    dst: &BlockPtr<T, BH, BR, TH>,
    p: Acc<BH, BR, TH, WG>,
    g: Acc<BH, BR, TH, WG>,
    masks: &BlockPtr<f32, BH, BR, TH>,
    has_mask: u32,
    scratch: usize,
) where
    [(); acc_len(BH, BR, TH)]:,
{
    let h = p.zip(g, |p, g| p * sigmoid(g));
    store_acc_staged_with(dst, &h, scratch, |r, c| masks.fetch_chunk(r, c), |_, _, mut v: [f32; 8], m: rustile::Fetched<f32>| {
        if has_mask != 0 {
            let m = m.get();
            for i in 0..8 {
                v[i] *= m[i];
            }
        }
        v
    });
}

// ---- projections on mma.sync -----------------------------------------------------------

/// `(W₀·x̂ᵀ, W₁·x̂ᵀ)` for weight rows `h0 .. h0+BH` of `w[0]` and `w[1]`
/// (`[hidden, dim]` each; with `TWO = false` only the first), against the
/// `BR` normalized pairs in shared memory at `xs` (`dim/BK` tiles of
/// `[BR, BK]`). The weight tiles are double-buffered at `ws`
/// (`4·BH·BK` bytes a stage): step k+1's copies run under step k's products.
#[inline(always)]
fn project<T: Elem, const BH: usize, const BR: usize, const BK: usize, const TH: usize, const TWO: bool>(
    w: [Ptr<T>; 2],
    [hidden, dim, h0]: [usize; 3],
    xs: usize,
    ws: usize,
) -> (Acc<BH, BR, TH>, Acc<BH, BR, TH>)
where
    [(); acc_len(BH, BR, TH)]:,
{
    let steps = cdiv(dim, BK);
    let w_tile = |stage: usize, i: usize| Shared::<T, BH, BK, TH>::at(ws + (2 * stage + i) * BH * BK * 2);
    let fill = |kt: usize, stage: usize| {
        if kt < steps {
            w_tile(stage, 0).copy_from(&BlockPtr::new(w[0], [hidden, dim], [dim, 1], [h0, kt * BK]));
            if TWO {
                w_tile(stage, 1).copy_from(&BlockPtr::new(w[1], [hidden, dim], [dim, 1], [h0, kt * BK]));
            }
        }
        commit_copies();
    };
    let (mut a0, mut a1) = (Acc::<BH, BR, TH>::zeros(), Acc::<BH, BR, TH>::zeros());
    fill(0, 0);
    for kt in 0..steps {
        // This step's tiles have landed, and every thread is past step
        // kt−1's products, so the other stage is free for step kt+1.
        wait_copies::<0>();
        sync();
        fill(kt + 1, (kt + 1) % 2);
        let x = Shared::<T, BR, BK, TH>::at(xs + kt * BR * BK * 2);
        a0 = dot(&w_tile(kt % 2, 0), &x, a0);
        if TWO {
            a1 = dot(&w_tile(kt % 2, 1), &x, a1);
        }
    }
    (a0, a1)
}

// A program: `BR` pairs, `BH` weight rows (one hidden block) at a time,
// k-steps of `BK`. `SMEM = BR·DMAX·2` for x̂ plus two stages of two weight
// tiles (`8·BH·BK`), which the epilogue reuses as its `4·BH·BR`-byte
// scratch. DMAX bounds `dim`. (`BR = 128` spilled: 352 bytes on 8 warps,
// 400 on 16 with their 128-register cap.)
#[kernel(
    configs = [
        (BR = 64, BH = 128, BK = 64, DMAX = 128, WARPS = 8, SMEM = 81920),
        (BR = 64, BH = 128, BK = 64, DMAX = 384, WARPS = 8, SMEM = 114688),
        (BR = 64, BH = 128, BK = 64, DMAX = 1024, WARPS = 8, SMEM = 196608),
    ],
    grid = [cdiv(pairs, BR), batch],
    dtypes = [bf16],
)]
/// LayerNorm of `BR` pairs' rows of `x` (`[batch, pairs, dim]`, fp32), then
/// the five projections by `w` (`[5·hidden, dim]`: W_lp, W_lg, W_rp, W_rg,
/// W_og stacked), written as `left`, `right`, `gate`, each `[batch, hidden,
/// pairs]`. `mask` (`[batch, pairs]`) multiplies left and right when
/// `has_mask` is 1.
pub fn trimul_project_kernel<T: Elem>(
    x: Ptr<f32>, mask: Ptr<f32>, norm_w: Ptr<f32>, norm_b: Ptr<f32>, w: Ptr<T>,
    left: PtrMut<T>, right: PtrMut<T>, gate: PtrMut<T>,
    batch: usize, pairs: usize, dim: usize, hidden: usize, eps: f32, has_mask: u32,
) {
    let _ = batch; // the grid
    let (r0, b) = (program_id(0) * BR, program_id(1));
    let x = x.offset(b * pairs * dim);
    let x_tile = |kt: usize| Shared::<T, BR, BK>::at(kt * BR * BK * 2);
    const WS: usize = BR * DMAX * 2;

    normalize_rows!(x, [pairs, dim, r0], [norm_w, norm_b], eps, x_tile);

    // The five products, a hidden block at a time. Accumulator rows are
    // channels and columns pairs: the stores below write [hidden, pairs].
    let weight = |j: usize| Ptr::offset(w, j * hidden * dim);
    let dst = |out: PtrMut<T>, h0: usize| BlockPtr::<T, BH, BR>::new(out.offset(b * hidden * pairs), [hidden, pairs], [pairs, 1], [h0, r0]);
    // The mask of a chunk's 8 pairs (the same for every channel: row stride 0).
    let masks = BlockPtr::<f32, BH, BR>::new(mask.offset(b * pairs), [hidden, if has_mask != 0 { pairs } else { 0 }], [0, 1], [0, r0]);
    let gated = #[inline(always)]
    |out: PtrMut<T>, j: usize, h0: usize| {
        let (p, g) = project::<T, BH, BR, BK, THREADS, true>([weight(j), weight(j + 1)], [hidden, dim, h0], 0, WS);
        store_gated(&dst(out, h0), p, g, &masks, has_mask, WS);
        // The next product's copies overwrite the scratch.
        sync();
    };
    let mut h0 = 0;
    while h0 < hidden {
        gated(left, 0, h0);
        gated(right, 2, h0);
        let (g, _) = project::<T, BH, BR, BK, THREADS, false>([weight(4), weight(4)], [hidden, dim, h0], 0, WS);
        store_acc_staged(&dst(gate, h0), &g, WS, |_, _, v: [f32; 8]| v.map(sigmoid));
        sync();
        h0 += BH;
    }
}

// ---- projections on Hopper's wgmma ----------------------------------------------------

/// [`project`] on the warpgroup tensor cores (`BH = 64·TH/128` rows, one
/// warpgroup per 64). The weight tiles stream through a ring of `STAGES`
/// tiles of `[BH, BK]` at `ws`, one tile a step and `STAGES − 2` steps of
/// copies in flight; with `TWO` the steps alternate between `w[0]` and
/// `w[1]` at the same k, so both products share one ring (a stage of two
/// tiles would not leave room for two programs an SM at `dim` = 384).
#[inline(always)]
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
fn project_wgmma<T: Elem, const BH: usize, const BR: usize, const BK: usize, const STAGES: usize, const TH: usize, const TWO: bool>(
    w: [Ptr<T>; 2],
    [hidden, dim, h0]: [usize; 3],
    xs: usize,
    ws: usize,
) -> (Acc<BH, BR, TH, true>, Acc<BH, BR, TH, true>)
where
    [(); acc_len(BH, BR, TH)]:,
    [(); { STAGES as u32 - 3 } as usize]:,
{
    use rustile::wgmma;
    let per = if TWO { 2 } else { 1 };
    let steps = per * cdiv(dim, BK);
    let tile = |s: usize| Shared::<T, BH, BK, TH>::at(ws + s * BH * BK * 2);
    // Every step commits one group (empty past the last), so that
    // `wait_copies` always counts the same number in flight.
    let fill = |q: usize, s: usize| {
        if q < steps {
            tile(s).copy_from(&BlockPtr::new(w[q % per], [hidden, dim], [dim, 1], [h0, q / per * BK]));
        }
        commit_copies();
    };
    for q in 0..STAGES - 2 {
        fill(q, q);
    }
    let next = |s: usize| if s + 1 == STAGES { 0 } else { s + 1 };
    let (mut read, mut write) = (0, STAGES - 2);
    let mut step = #[inline(always)]
    |q: usize, acc: &mut Acc<BH, BR, TH, true>| {
        // Step q's tile has landed (and, fenced, is visible to the tensor
        // cores); every warpgroup is past step q−2, whose stage the fill reuses.
        wait_copies::<{ STAGES as u32 - 3 }>();
        wgmma::fence_shared();
        sync();
        wgmma::dot_async(&tile(read), &Shared::<T, BR, BK, TH>::at(xs + q / per * BR * BK * 2), acc);
        fill(q + STAGES - 2, write);
        wgmma::wait::<1, BH, BR, TH>(acc);
        (read, write) = (next(read), next(write));
    };
    let (mut a0, mut a1) = (Acc::<BH, BR, TH, true>::zeros(), Acc::<BH, BR, TH, true>::zeros());
    let mut q = 0;
    while q < steps {
        step(q, &mut a0);
        if TWO {
            step(q + 1, &mut a1);
        }
        q += per;
    }
    wgmma::wait::<0, BH, BR, TH>(&mut a0);
    wgmma::wait::<0, BH, BR, TH>(&mut a1);
    (a0, a1)
}

// The program of `trimul_project_kernel` with `BH = 64·WARPS/4`. `SMEM`:
// x̂ (`BR·DMAX·2`, from the first 1024-byte boundary: wgmma's swizzle
// period) and the ring of `STAGES` weight tiles (`BH·BK·2` each), which
// the epilogue reuses as its `4·BH·BR`-byte scratch. At `DMAX` ≤ 384 that
// is at most 112 KiB, so two programs share an SM (`OCC = 2`: 128
// registers, which the accumulators of the gated pair, 64, leave room in).
#[kernel(
    configs = [
        (BR = 64, BH = 128, BK = 64, DMAX = 128, WARPS = 8, STAGES = 4, OCC = 2, SMEM = 81920),
        (BR = 64, BH = 128, BK = 64, DMAX = 384, WARPS = 8, STAGES = 4, OCC = 2, SMEM = 114688),
        (BR = 64, BH = 128, BK = 64, DMAX = 1024, WARPS = 8, STAGES = 4, OCC = 1, SMEM = 196608),
    ],
    grid = [cdiv(pairs, BR), batch],
    dtypes = [bf16],
    arch = sm_90a,
)]
/// [`trimul_project_kernel`] on Hopper (the same arguments, `hidden ≤ BH`):
/// the products on `wgmma`, two programs an SM.
pub fn trimul_project_wgmma_kernel<T: Elem>(
    x: Ptr<f32>, mask: Ptr<f32>, norm_w: Ptr<f32>, norm_b: Ptr<f32>, w: Ptr<T>,
    left: PtrMut<T>, right: PtrMut<T>, gate: PtrMut<T>,
    batch: usize, pairs: usize, dim: usize, hidden: usize, eps: f32, has_mask: u32,
) {
    let _ = batch; // the grid
    let (r0, b) = (program_id(0) * BR, program_id(1));
    let x = x.offset(b * pairs * dim);
    let xs = rustile::wgmma::pad(THREADS);
    let ws = xs + BR * DMAX * 2;
    let x_tile = |kt: usize| Shared::<T, BR, BK>::at(xs + kt * BR * BK * 2);

    // (The first product's first step fences these stores for the tensor cores.)
    normalize_rows!(x, [pairs, dim, r0], [norm_w, norm_b], eps, x_tile);

    let weight = |j: usize| Ptr::offset(w, j * hidden * dim);
    let dst = |out: PtrMut<T>| BlockPtr::<T, BH, BR>::new(out.offset(b * hidden * pairs), [hidden, pairs], [pairs, 1], [0, r0]);
    let masks = BlockPtr::<f32, BH, BR>::new(mask.offset(b * pairs), [hidden, if has_mask != 0 { pairs } else { 0 }], [0, 1], [0, r0]);
    // One hidden block (the host keeps hidden ≤ BH): no loop around the
    // products, whose addresses the compiler would otherwise hoist out of
    // it and keep in registers across all three (spilling at 128).
    let gated = #[inline(always)]
    |out: PtrMut<T>, j: usize| {
        let (p, g) = project_wgmma::<T, BH, BR, BK, STAGES, THREADS, true>([weight(j), weight(j + 1)], [hidden, dim, 0], xs, ws);
        store_gated(&dst(out), p, g, &masks, has_mask, ws);
        sync();
    };
    gated(left, 0);
    gated(right, 2);
    let (g, _) = project_wgmma::<T, BH, BR, BK, STAGES, THREADS, false>([weight(4), weight(4)], [hidden, dim, 0], xs, ws);
    store_acc_staged(&dst(gate), &g, ws, |_, _, v: [f32; 8]| v.map(sigmoid));
}

// ---- output: LayerNorm over channels, gate, projection --------------------------------

// A program: `BP` pairs of `HM ≥ hidden` channels, `BN` output columns at
// a time. `SMEM`: u (`HM·BP·2`), two stages of W_out (`BN·HM·2` each) and
// the store's scratch (`4·BP·BN`). Two programs an SM (`OCC = 2`: 128
// registers, no spill), so one's loads of t run under the other's stores.
#[kernel(
    configs = [
        (BP = 64, HM = 128, BN = 64, WARPS = 8, OCC = 2, SMEM = 65536),
        (BP = 64, HM = 128, BN = 128, WARPS = 8, OCC = 2, SMEM = 114688),
    ],
    grid = [cdiv(pairs, BP), batch],
    dtypes = [bf16],
)]
/// `out = (LayerNorm(t) ⊙ gate)·W_outᵀ` for `BP` pairs: `t` and `gate` are
/// `[batch, hidden, pairs]`, `w_out` `[dim, hidden]`, out fp32 `[batch,
/// pairs, dim]`; `hidden ≤ HM`.
pub fn trimul_out_kernel<T: Elem>(
    t: Ptr<T>, gate: Ptr<T>, norm_w: Ptr<f32>, norm_b: Ptr<f32>, w_out: Ptr<T>, out: PtrMut<f32>,
    batch: usize, pairs: usize, dim: usize, hidden: usize, eps: f32,
) {
    let _ = batch; // the grid
    let (p0, b) = (program_id(0) * BP, program_id(1));
    let u = Shared::<T, HM, BP>::at(0);
    let w_tile = |stage: usize| Shared::<T, BN, HM>::at(HM * BP * 2 + stage * BN * HM * 2);
    const SCRATCH: usize = HM * BP * 2 + 2 * BN * HM * 2;
    let fill = |n0: usize, stage: usize| {
        if n0 < dim {
            w_tile(stage).copy_from(&BlockPtr::rows(w_out, dim, hidden, [n0, 0]));
        }
        commit_copies();
    };
    // W_out's first tile copies while the pairs are normalized.
    fill(0, 0);

    // Channels are rows: a pair's statistics are column sums. Rows past
    // `hidden` load as 0 and get weight and bias 0, so u is 0 there.
    let tile = |p: Ptr<T>| load(&BlockPtr::<T, HM, BP>::new(p.offset(b * hidden * pairs), [hidden, pairs], [pairs, 1], [0, p0])).cast::<f32>();
    let (tt, g) = (tile(t), tile(gate));
    let inv = 1.0 / hidden as f32;
    let mean = tt.col_sum() * inv;
    let inside = Tile::<bool, HM, BP>::from_fn(|r, _| r < hidden);
    let d = inside.select(tt - mean, Tile::zeros());
    let rstd = ((d * d).col_sum() * inv + eps).rsqrt();
    let (wc, bc) = (Col::<f32, HM, BP>::load(norm_w, 0, hidden), Col::<f32, HM, BP>::load(norm_b, 0, hidden));
    // u is stored [channel, pair]: the product's left operand with k as its row index.
    u.store(&((d * rstd * wc + bc) * g).cast::<T>());

    let dst = BlockPtr::<f32, BP, BN>::rows(out.offset(b * pairs * dim), pairs, dim, [p0, 0]);
    let mut n0 = 0;
    let mut stage = 0;
    while n0 < dim {
        // u and this tile of W_out are visible; the other stage's readers are done.
        wait_copies::<0>();
        sync();
        fill(n0 + BN, 1 - stage);
        let w = w_tile(stage);
        let mut acc = Acc::<BP, BN>::zeros();
        for ks in 0..HM / 16 {
            acc = mma(&FragA::load_t(&u, ks), &FragB::load(&w, ks), acc);
        }
        store_acc_staged(&dst.advance([0, n0]), &acc, SCRATCH, |_, _, v: [f32; 8]| v);
        n0 += BN;
        stage = 1 - stage;
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
