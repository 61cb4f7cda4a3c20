//! Flash attention, backward: `dq`, `dk`, `dv` from `q`, `k`, `v`, `o`,
//! `do` and the forward's log-sum-exp, recomputing the attention tiles
//! instead of storing them.
//!
//! Three kernels, no atomics:
//! 1. [`attention_bwd_rows_kernel`]: `delta = rowsum(do ⊙ o)` per query and head;
//! 2. [`attention_bwd_kv_kernel`]: a program per key block and key/value head
//!    walks every query block of every query head that reads it (GQA sums
//!    them in registers), with the products transposed so that keys are
//!    the rows: `Sᵀ = K·Qᵀ`, `Pᵀ = exp(scale·Sᵀ − lse)`, `dV += Pᵀ·dO`,
//!    `dPᵀ = V·dOᵀ`, `dSᵀ = Pᵀ ⊙ (dPᵀ − delta)`, `dK += scale·dSᵀ·Q`;
//! 3. [`attention_bwd_q_kernel`]: a program per query block and head walks
//!    the key blocks: `dQ += scale·dS·K`.
//!
//! On Hopper the dK/dV program can make dQ too (`DQ = 1` of
//! [`super::attention_bwd_kv_wgmma_kernel`]): each step adds its part of
//! `dS·K` into an f32 sum through the copy engine, and
//! [`attention_bwd_dq_kernel`] rounds the sum into `dq` in place of 3.
//!
//! `Pᵀ` and `dSᵀ` are left operands straight from registers (`dot_acc`); the
//! right operands are the stored tiles read transposed (`ldmatrix.trans`).
use super::{dot_head, query_block, store_head, Head, Seq, CAUSAL, VARLEN};
use rustile::prelude::*;

// ---- 1. delta = rowsum(do ⊙ o) ------------------------------------------------------------

/// `delta[h, t] = Σ_c do[t, h, c]·o[t, h, c]` for `o`, `do` of `tokens`
/// rows of `heads` heads of `d` columns, in f32, written in the layout of
/// the forward's log-sum-exp (`[heads, tokens]`), so that the kernels read
/// a query block's values of both as one contiguous run.
///
/// A program reads `BM` (token, head) rows as one contiguous run (`o` seen
/// as `[tokens·heads, d]`) in 16-column slices up to `BN`, the head dim
/// rounded up to 16 (the first config whose `BN` holds `d` runs), and
/// scatters the sums. Slices, not one `BM × 128` tile: at `d = 72` such a
/// tile left 7 of every 16 threads without a column to read, and the
/// kernel ran at a fifth of the memory bandwidth, bound by its
/// instructions (bench/RESULTS.md, 2026-11-23,
/// “Head dim 72 backward: a memory-bound delta kernel…”).
#[kernel(
    configs = [
        (BM = 64, BN = 64, WARPS = 4),
        (BM = 64, BN = 80, WARPS = 4),
        (BM = 64, BN = 96, WARPS = 4),
        (BM = 64, BN = 128, WARPS = 4),
    ],
    grid = [cdiv(tokens * heads, BM)],
    dtypes = [bf16, f16],
)]
pub fn attention_bwd_rows_kernel<T: Elem>(o: Ptr<T>, d_o: Ptr<T>, delta: PtrMut<f32>, tokens: usize, heads: usize, d: usize) {
    let (r0, rows) = (program_id(0) * BM, tokens * heads);
    let slice = |p: Ptr<T>, j: usize| load_or(&BlockPtr::<T, BM, 16>::new(p, [rows, d], [d, 1], [r0, 16 * j]), 0.0).cast::<f32>();
    // Products summed across the slices first and across threads once, so
    // that no shuffle stands between one slice's loads and the next's.
    let mut acc = Tile::<f32, BM, 16>::zeros();
    for j in 0..BN / 16 {
        acc = acc + slice(o, j) * slice(d_o, j);
    }
    acc.row_sum().scatter(delta, r0, rows, |r| (r % heads) * tokens + r / heads);
}

/// `dq = scale · dq_sum` rounded to `T`, elementwise over `n` values: the
/// dQ that the dK/dV programs added into `dq_sum` (f32, `dq`'s layout).
#[kernel(
    configs = [(BLOCK = 4096, WARPS = 8)],
    grid = [cdiv(n, BLOCK)],
    dtypes = [bf16, f16],
)]
pub fn attention_bwd_dq_kernel<T: Elem>(dq_sum: Ptr<f32>, dq: PtrMut<T>, n: usize, scale: f32) {
    let at = [0, program_id(0) * BLOCK];
    let sum = load(&BlockPtr::<f32, 1, BLOCK>::rows(dq_sum, 1, n, at));
    store(&BlockPtr::rows(dq, 1, n, at), &sum.map(|x| x * scale).cast::<T>());
}

// ---- shared by 2 and 3 ---------------------------------------------------------------------

/// The probability of a score `x` from its row's log-sum-exp `lse`: the
/// forward's `exp(scale·x − lse)` as one multiply-add and a base-2
/// exponent (`c = scale·log2 e`).
#[inline(always)]
fn prob(x: f32, c: f32, lse: f32) -> f32 {
    math::exp2(x * c - lse * core::f32::consts::LOG2_E)
}

/// The batch's query tokens, `delta`'s row length (the host allocates it
/// from this too): `batch·q_bs`, or with variable lengths all of them
/// (`lse_h`, the log-sum-exp's row length).
#[inline(always)]
pub(super) fn query_tokens(batch: usize, q_bs: usize, lse_h: usize, varlen: bool) -> usize {
    if varlen { lse_h } else { batch * q_bs }
}

/// The (query head, query block) pairs that read key block `c0` of a
/// key/value head, as one walk of `steps`: the group's query heads one
/// after another, each from the first query block that sees the keys.
#[derive(Clone, Copy)]
pub(super) struct Walk {
    pub(super) steps: usize,
    first_qb: usize,
    blocks: usize,
    h0: usize,
    bm: usize,
}

impl Walk {
    /// Key head `hk`, read by `group` query heads in blocks of `bm` queries.
    #[inline(always)]
    pub(super) fn of(s: &Seq, c0: usize, bm: usize, hk: usize, group: usize, causal: bool) -> Walk {
        // Top-left causal: query i reads key j when j ≤ i.
        let first_qb = if causal { c0 / bm } else { 0 };
        let blocks = if c0 < s.lk { cdiv(s.lq, bm).saturating_sub(first_qb) } else { 0 };
        Walk { steps: group * blocks, first_qb, blocks, h0: hk * group, bm }
    }

    /// Step `t`: query head `h`, queries `r0..r0+bm`.
    #[inline(always)]
    pub(super) fn at(&self, t: usize) -> (usize, usize) {
        (self.h0 + t / self.blocks, (self.first_qb + t % self.blocks) * self.bm)
    }
}

// ---- 2. dK and dV ------------------------------------------------------------------------

/// One block of `BN` keys of one key/value head: `dk`, `dv` in `k`'s layout.
/// The arguments are the forward's (`lse` in its layout, `delta` `[heads,
/// tokens]` of the batch's query tokens), with `do` beside `o`; a variable-length batch gives its
/// longest key sequence as `sk` (the grid).
///
/// The query blocks that read this key block are one flat [`Walk`], so
/// that the next one's Q and dO load while this one multiplies. D = 128 takes 32-query blocks: dK and dV hold 64 registers
/// each there, and two 64-wide score blocks more would spill.
#[kernel(
    configs = [
        (D = 64, BM = 64, BN = 64, WARPS = 4, SMEM = 49152),
        (D = 80, BM = 64, BN = 64, WARPS = 4, SMEM = 61440),
        (D = 96, BM = 64, BN = 64, WARPS = 4, SMEM = 73728),
        (D = 128, BM = 32, BN = 64, WARPS = 4, SMEM = 65536),
    ],
    grid = [cdiv(crate::attention::key_rows(sk, kv_bs, flags), BN), kv_heads, batch],
    dtypes = [bf16, f16],
)]
pub fn attention_bwd_kv_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, d_o: Ptr<T>, lse: Ptr<f32>, delta: Ptr<f32>, dk: PtrMut<T>, dv: PtrMut<T>,
    cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
) {
    const D0: usize = if D >= 128 { 128 } else { 64 };
    const TAIL: bool = D > D0;
    const D1: usize = if TAIL { D - D0 } else { 32 };
    type AccW<const N: usize> = rustile::Acc<BN, N, THREADS, true>;
    type Rows<const R: usize> = Head<T, R, D0, D1, THREADS>;

    let (kb, hk, z) = (program_id(0), program_id(1), program_id(2));
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    // The sequence's rows of dk and dv: with `Attention::keys`, the rows past
    // the keys used get zeros (no query reads them).
    let rows = if varlen { s.lk } else { kv_bs };
    let c0 = kb * BN;
    if c0 >= rows {
        return;
    }
    let (qp, dop) = (q.offset(s.q_at()), d_o.offset(s.q_at()));
    let c = scale * core::f32::consts::LOG2_E;
    let tokens = query_tokens(batch, q_bs, lse_h, varlen);

    // Shared memory: K, V, then two stages of Q and dO.
    let (sk_, sv_) = (Rows::<BN>::at(0, TAIL), Rows::<BN>::at(BN * D * 2, TAIL));
    let qd = |stage: usize, which: usize| Rows::<BM>::at(2 * BN * D * 2 + (2 * stage + which) * BM * D * 2, TAIL);
    sk_.copy_from(k.offset(s.k_at()), [s.lk, s.ldk, hk * d, d], c0);
    sv_.copy_from(v.offset(s.k_at()), [s.lk, s.ldk, hk * d, d], c0);

    let walk = Walk::of(&s, c0, BM, hk, heads / kv_heads, causal);
    let copy_qd = |t: usize| {
        let (h, r0) = walk.at(t);
        qd(t % 2, 0).copy_from(qp, [s.lq, s.ldq, h * d, d], r0);
        qd(t % 2, 1).copy_from(dop, [s.lq, s.ldq, h * d, d], r0);
    };
    if walk.steps > 0 {
        copy_qd(0);
    }
    commit_copies();

    let (mut dk0, mut dk1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    let (mut dv0, mut dv1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    for t in 0..walk.steps {
        // Step t's tiles have landed, and every thread is done with step t−1's stage.
        wait_copies::<0>();
        sync();
        if t + 1 < walk.steps {
            copy_qd(t + 1);
        }
        commit_copies();
        let (h, r0) = walk.at(t);
        let lse_at = s.lse0 + h * lse_h;
        let (sq_, sd_) = (qd(t % 2, 0), qd(t % 2, 1));
        // Sᵀ: keys are rows, queries columns.
        let pt = dot_head(&sk_, &sq_, AccW::<BM>::zeros()).map(|r, col, x| {
            let (key, query) = (c0 + r, r0 + col);
            if query >= s.lq || key >= s.lk || (causal && key > query) { 0.0 } else { prob(x, c, lse.read(lse_at + query)) }
        });
        let ppk = pt.pack::<T>();
        dv0 = dot_acc(&ppk, &sd_.main, dv0);
        if TAIL {
            dv1 = dot_acc(&ppk, &sd_.rest, dv1);
        }
        // dSᵀ = Pᵀ ⊙ (dPᵀ − delta[query]); queries past the end have P = 0.
        let dpt = dot_head(&sv_, &sd_, AccW::<BM>::zeros());
        let delta_at = h * tokens + s.q0 + r0;
        let dst = pt.zip(dpt.map(|_, col, x| if r0 + col < s.lq { x - delta.read(delta_at + col) } else { 0.0 }), |p, dp| p * dp);
        let dspk = dst.pack::<T>();
        dk0 = dot_acc(&dspk, &sq_.main, dk0);
        if TAIL {
            dk1 = dot_acc(&dspk, &sq_.rest, dk1);
        }
    }
    let out = [rows, s.ldk, hk * d, d];
    store_head(dk.offset(s.k_at()), out, c0, &dk0, &dk1, TAIL, scale);
    store_head(dv.offset(s.k_at()), out, c0, &dv0, &dv1, TAIL, 1.0);
}

// ---- 3. dQ -------------------------------------------------------------------------------

/// One block of `BM` queries of one head: `dq` in `q`'s layout. K and V of
/// the next key block load while this one multiplies.
#[kernel(
    configs = [
        (D = 64, BM = 64, BN = 64, WARPS = 4, SMEM = 49152),
        (D = 80, BM = 64, BN = 64, WARPS = 4, SMEM = 61440),
        (D = 96, BM = 64, BN = 64, WARPS = 4, SMEM = 73728),
        (D = 128, BM = 64, BN = 64, WARPS = 4, SMEM = 98304),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
)]
pub fn attention_bwd_q_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, d_o: Ptr<T>, lse: Ptr<f32>, delta: Ptr<f32>, dq: PtrMut<T>,
    cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
) {
    const D0: usize = if D >= 128 { 128 } else { 64 };
    const TAIL: bool = D > D0;
    const D1: usize = if TAIL { D - D0 } else { 32 };
    type AccW<const N: usize> = rustile::Acc<BM, N, THREADS, true>;
    type Rows<const R: usize> = Head<T, R, D0, D1, THREADS>;

    let (h, z) = (program_id(1), program_id(2));
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let qb = query_block(program_id(0), sq, BM, causal);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let r0 = qb * BM;
    if r0 >= s.lq {
        return;
    }
    let hk = h / (heads / kv_heads);
    let (kp, vp) = (k.offset(s.k_at()), v.offset(s.k_at()));
    let c = scale * core::f32::consts::LOG2_E;
    let lse_at = s.lse0 + h * lse_h;
    let delta_at = h * query_tokens(batch, q_bs, lse_h, varlen) + s.q0;

    // Shared memory: Q, dO, then two stages of K and V.
    let (sq_, sd_) = (Rows::<BM>::at(0, TAIL), Rows::<BM>::at(BM * D * 2, TAIL));
    let kv = |stage: usize, which: usize| Rows::<BN>::at(2 * BM * D * 2 + (2 * stage + which) * BN * D * 2, TAIL);
    let copy_kv = |j: usize| {
        kv(j % 2, 0).copy_from(kp, [s.lk, s.ldk, hk * d, d], j * BN);
        kv(j % 2, 1).copy_from(vp, [s.lk, s.ldk, hk * d, d], j * BN);
    };
    sq_.copy_from(q.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0);
    sd_.copy_from(d_o.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0);
    let blocks = s.key_blocks(r0, BM, BN, causal);
    if blocks > 0 {
        copy_kv(0);
    }
    commit_copies();

    let (mut dq0, mut dq1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    for j in 0..blocks {
        // Block j has landed, and every thread is done with block j−1's stage.
        wait_copies::<0>();
        sync();
        if j + 1 < blocks {
            copy_kv(j + 1);
        }
        commit_copies();
        let c0 = j * BN;
        let (sk_, sv_) = (kv(j % 2, 0), kv(j % 2, 1));
        let p = dot_head(&sq_, &sk_, AccW::<BN>::zeros()).map(|r, col, x| {
            if r0 + r >= s.lq || c0 + col >= s.lk || (causal && c0 + col > r0 + r) { 0.0 } else { prob(x, c, lse.read(lse_at + r0 + r)) }
        });
        let dp = dot_head(&sd_, &sv_, AccW::<BN>::zeros());
        let ds = p.zip(dp.map(|r, _, x| if r0 + r < s.lq { x - delta.read(delta_at + r0 + r) } else { 0.0 }), |p, dp| p * dp).pack::<T>();
        dq0 = dot_acc(&ds, &sk_.main, dq0);
        if TAIL {
            dq1 = dot_acc(&ds, &sk_.rest, dq1);
        }
    }
    store_head(dq.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0, &dq0, &dq1, TAIL, scale);
}
