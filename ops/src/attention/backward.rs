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
//! `Pᵀ` and `dSᵀ` are left operands straight from registers (`dot_acc`); the
//! right operands are the stored tiles read transposed (`ldmatrix.trans`).
use super::{copy_head, sequence, CAUSAL, VARLEN};
use rustile::prelude::*;

// ---- 1. delta = rowsum(do ⊙ o) ------------------------------------------------------------

/// `delta[r] = Σ_c do[r, c]·o[r, c]` for the `rows × d` matrices `do` and
/// `o` (a row is one token of one head), in f32.
#[kernel(configs = [(BM = 32, BN = 128, WARPS = 4)], grid = [cdiv(rows, BM)], dtypes = [bf16, f16])]
pub fn attention_bwd_rows_kernel<T: Elem>(o: Ptr<T>, d_o: Ptr<T>, delta: PtrMut<f32>, rows: usize, d: usize) {
    let r0 = program_id(0) * BM;
    let x = load_or(&BlockPtr::<T, BM, BN>::rows(o, rows, d, [r0, 0]), 0.0).cast::<f32>();
    let y = load_or(&BlockPtr::<T, BM, BN>::rows(d_o, rows, d, [r0, 0]), 0.0).cast::<f32>();
    (x * y).row_sum().store(delta, r0, rows);
}

// ---- 2. dK and dV ------------------------------------------------------------------------

/// One block of `BN` keys of one key/value head: `dk`, `dv` in `k`'s layout.
/// The arguments are the forward's (`lse` in its layout, `delta` `[tokens,
/// heads]`), with `do` beside `o`; a variable-length batch gives its
/// longest key sequence as `sk` (the grid).
///
/// The (query head, query block) pairs that read this key block are one
/// flat walk, so that the next pair's Q and dO load while this one
/// multiplies. D = 128 takes 32-query blocks: dK and dV hold 64 registers
/// each there, and two 64-wide score blocks more would spill.
#[kernel(
    configs = [
        (D = 64, BM = 64, BN = 64, WARPS = 4, SMEM = 49152),
        (D = 80, BM = 64, BN = 64, WARPS = 4, SMEM = 61440),
        (D = 96, BM = 64, BN = 64, WARPS = 4, SMEM = 73728),
        (D = 128, BM = 32, BN = 64, WARPS = 4, SMEM = 65536),
    ],
    grid = [cdiv(sk.max(kv_bs), BN), kv_heads, batch],
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

    let (kb, hk, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let (q0, lq, k0, lk) = sequence(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs], varlen);
    // The sequence's rows of dk and dv: with `Attention::keys`, the rows past
    // the keys used get zeros (no query reads them).
    let rows = if varlen { lk } else { kv_bs };
    let c0 = kb * BN;
    if c0 >= rows {
        return;
    }
    let (ldq, ldk) = (heads * d, kv_heads * d);
    let (qp, dop, kp, vp) = (q.offset(q0 * ldq), d_o.offset(q0 * ldq), k.offset(k0 * ldk), v.offset(k0 * ldk));
    let c = scale * core::f32::consts::LOG2_E;

    // Shared memory: K, V, then two stages of Q and dO.
    let tiles = |at: usize, rows: usize| (at, if TAIL { at + rows * D0 * 2 } else { at });
    let (ka, kt) = tiles(0, BN);
    let (va, vt) = tiles(BN * D * 2, BN);
    let (sk0, sk1) = (Shared::<T, BN, D0>::at(ka), Shared::<T, BN, D1>::at(kt));
    let (sv0, sv1) = (Shared::<T, BN, D0>::at(va), Shared::<T, BN, D1>::at(vt));
    let qd = |stage: usize, which: usize| {
        let (a, t) = tiles(2 * BN * D * 2 + (2 * stage + which) * BM * D * 2, BM);
        (Shared::<T, BM, D0>::at(a), Shared::<T, BM, D1>::at(t))
    };
    copy_head(sk0, sk1, TAIL, kp, [lk, ldk, hk * d, d], c0);
    copy_head(sv0, sv1, TAIL, vp, [lk, ldk, hk * d, d], c0);

    // Top-left causal: query i reads key j when j ≤ i, so the first query block that reads this key block.
    let first_qb = if causal { c0 / BM } else { 0 };
    let blocks = if c0 < lk { cdiv(lq, BM).saturating_sub(first_qb) } else { 0 };
    let group = heads / kv_heads;
    let steps = group * blocks;
    // Step t: query head h, queries r0..r0+BM.
    let at = |t: usize| (hk * group + t / blocks, (first_qb + t % blocks) * BM);
    let copy_qd = |t: usize| {
        let (h, r0) = at(t);
        let ((q0t, q1t), (d0t, d1t)) = (qd(t % 2, 0), qd(t % 2, 1));
        copy_head(q0t, q1t, TAIL, qp, [lq, ldq, h * d, d], r0);
        copy_head(d0t, d1t, TAIL, dop, [lq, ldq, h * d, d], r0);
    };
    if steps > 0 {
        copy_qd(0);
    }
    commit_copies();

    let (mut dk0, mut dk1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    let (mut dv0, mut dv1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    for t in 0..steps {
        // Step t's tiles have landed, and every thread is done with step t−1's stage.
        wait_copies::<0>();
        sync();
        if t + 1 < steps {
            copy_qd(t + 1);
        }
        commit_copies();
        let (h, r0) = at(t);
        let lse_at = if varlen { q0 } else { z * heads * sq } + h * lse_h;
        let ((sq0, sq1), (sd0, sd1)) = (qd(t % 2, 0), qd(t % 2, 1));
        // Sᵀ: keys are rows, queries columns.
        let mut st = dot(&sk0, &sq0, AccW::<BM>::zeros());
        if TAIL {
            st = dot(&sk1, &sq1, st);
        }
        let pt = st.map(|r, col, x| {
            let (key, query) = (c0 + r, r0 + col);
            if query >= lq || key >= lk || (causal && key > query) {
                0.0
            } else {
                math::exp2(x * c - lse.read(lse_at + query) * core::f32::consts::LOG2_E)
            }
        });
        let ppk = pt.pack::<T>();
        dv0 = dot_acc(&ppk, &sd0, dv0);
        if TAIL {
            dv1 = dot_acc(&ppk, &sd1, dv1);
        }
        let mut dpt = dot(&sv0, &sd0, AccW::<BM>::zeros());
        if TAIL {
            dpt = dot(&sv1, &sd1, dpt);
        }
        // dSᵀ = Pᵀ ⊙ (dPᵀ − delta[query]); queries past the end have P = 0.
        let dst = pt.zip(dpt.map(|_, col, x| if r0 + col < lq { x - delta.read((q0 + r0 + col) * heads + h) } else { 0.0 }), |p, dp| p * dp);
        let dspk = dst.pack::<T>();
        dk0 = dot_acc(&dspk, &sq0, dk0);
        if TAIL {
            dk1 = dot_acc(&dspk, &sq1, dk1);
        }
    }
    let (dkp, dvp, col) = (dk.offset(k0 * ldk), dv.offset(k0 * ldk), hk * d);
    let at = |c: usize| [c0, col + c];
    store_acc(&BlockPtr::<T, BN, D0>::new(dkp, [rows, col + d], [ldk, 1], at(0)), &dk0.map(|_, _, x| x * scale));
    store_acc(&BlockPtr::<T, BN, D0>::new(dvp, [rows, col + d], [ldk, 1], at(0)), &dv0);
    if TAIL {
        store_acc(&BlockPtr::<T, BN, D1>::new(dkp, [rows, col + d], [ldk, 1], at(D0)), &dk1.map(|_, _, x| x * scale));
        store_acc(&BlockPtr::<T, BN, D1>::new(dvp, [rows, col + d], [ldk, 1], at(D0)), &dv1);
    }
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

    let (qb, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let (q0, lq, k0, lk) = sequence(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs], varlen);
    let r0 = qb * BM;
    if r0 >= lq {
        return;
    }
    let hk = h / (heads / kv_heads);
    let (ldq, ldk) = (heads * d, kv_heads * d);
    let (qp, dop, kp, vp) = (q.offset(q0 * ldq), d_o.offset(q0 * ldq), k.offset(k0 * ldk), v.offset(k0 * ldk));
    let c = scale * core::f32::consts::LOG2_E;
    let lse_at = if varlen { q0 } else { z * heads * sq } + h * lse_h;

    // Shared memory: Q, dO, then two stages of K and V.
    let tiles = |at: usize, rows: usize| (at, if TAIL { at + rows * D0 * 2 } else { at });
    let (qa, qt) = tiles(0, BM);
    let (da, dt) = tiles(BM * D * 2, BM);
    let (sq0, sq1) = (Shared::<T, BM, D0>::at(qa), Shared::<T, BM, D1>::at(qt));
    let (sd0, sd1) = (Shared::<T, BM, D0>::at(da), Shared::<T, BM, D1>::at(dt));
    let kv = |stage: usize, which: usize| {
        let (a, t) = tiles(2 * BM * D * 2 + (2 * stage + which) * BN * D * 2, BN);
        (Shared::<T, BN, D0>::at(a), Shared::<T, BN, D1>::at(t))
    };
    let copy_kv = |j: usize| {
        let ((k0t, k1t), (v0t, v1t)) = (kv(j % 2, 0), kv(j % 2, 1));
        copy_head(k0t, k1t, TAIL, kp, [lk, ldk, hk * d, d], j * BN);
        copy_head(v0t, v1t, TAIL, vp, [lk, ldk, hk * d, d], j * BN);
    };
    copy_head(sq0, sq1, TAIL, qp, [lq, ldq, h * d, d], r0);
    copy_head(sd0, sd1, TAIL, dop, [lq, ldq, h * d, d], r0);
    let blocks = if causal { cdiv(lk.min(r0 + BM), BN) } else { cdiv(lk, BN) };
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
        let ((sk0, sk1), (sv0, sv1)) = (kv(j % 2, 0), kv(j % 2, 1));
        let mut s = dot(&sq0, &sk0, AccW::<BN>::zeros());
        if TAIL {
            s = dot(&sq1, &sk1, s);
        }
        let p = s.map(|r, col, x| {
            if r0 + r >= lq || c0 + col >= lk || (causal && c0 + col > r0 + r) {
                0.0
            } else {
                math::exp2(x * c - lse.read(lse_at + r0 + r) * core::f32::consts::LOG2_E)
            }
        });
        let mut dp = dot(&sd0, &sv0, AccW::<BN>::zeros());
        if TAIL {
            dp = dot(&sd1, &sv1, dp);
        }
        let ds = p.zip(dp.map(|r, _, x| if r0 + r < lq { x - delta.read((q0 + r0 + r) * heads + h) } else { 0.0 }), |p, dp| p * dp).pack::<T>();
        dq0 = dot_acc(&ds, &sk0, dq0);
        if TAIL {
            dq1 = dot_acc(&ds, &sk1, dq1);
        }
    }
    let (dqp, col) = (dq.offset(q0 * ldq), h * d);
    store_acc(&BlockPtr::<T, BM, D0>::new(dqp, [lq, col + d], [ldq, 1], [r0, col]), &dq0.map(|_, _, x| x * scale));
    if TAIL {
        store_acc(&BlockPtr::<T, BM, D1>::new(dqp, [lq, col + d], [ldq, 1], [r0, col + D0]), &dq1.map(|_, _, x| x * scale));
    }
}
