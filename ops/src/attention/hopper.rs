//! Flash attention forward on Hopper (sm_90a): [`super::attention_fwd_kernel`]'s
//! program with both products on the warpgroup tensor cores (`wgmma`).
//!
//! Two warpgroups take 64 query rows each of a 128-row block. `S = Q·Kᵀ`
//! reads Q and K straight from shared memory; `O += P·V` takes `P` from the
//! registers the softmax left it in and V from shared memory, N-major (V's
//! rows are keys). `wgmma` reads rows of at most 128 bytes, so a head is
//! stored as 64-column tiles: one at D = 64, two at 128, and 64 plus a tile
//! of 16 or 32 columns at 72/80 and 96.
use super::{copy_head, sequence, CAUSAL, VARLEN};
use rustile::prelude::*;
use rustile::wgmma;

/// One block of `BM` query rows of one head, as [`super::attention_fwd_kernel`]
/// (the same arguments).
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 128, WARPS = 8, SMEM = 81920),
        (D = 80, BM = 128, BN = 128, WARPS = 8, SMEM = 102400),
        (D = 96, BM = 128, BN = 128, WARPS = 8, SMEM = 122880),
        (D = 128, BM = 128, BN = 128, WARPS = 8, SMEM = 163840),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
pub fn attention_fwd_wgmma_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, o: PtrMut<T>, lse: PtrMut<f32>, cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
) {
    // A head as a 64-column tile and, past 64, a second one of D1 columns
    // (otherwise D1 names an unused tile).
    const TAIL: bool = D > 64;
    const D1: usize = if TAIL { D - 64 } else { 64 };
    type AccW<const N: usize> = rustile::Acc<BM, N, THREADS, true>;

    let (qb, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let (q0, lq, k0, lk) = sequence(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs], varlen);
    let r0 = qb * BM;
    if r0 >= lq {
        return;
    }
    let kvh = h / (heads / kv_heads);
    let (ldq, ldk) = (heads * d, kv_heads * d);
    let (qp, kp, vp) = (q.offset(q0 * ldq), k.offset(k0 * ldk), v.offset(k0 * ldk));
    let blocks = if causal { cdiv(lk.min(r0 + BM), BN) } else { cdiv(lk, BN) };

    // Shared memory: Q, then two stages of K and V; every tile starts on a
    // multiple of 1024 bytes (the swizzle period wgmma's descriptors assume).
    let tiles = |at: usize, rows: usize| (at, if TAIL { at + rows * 64 * 2 } else { at });
    let (qa, qt) = tiles(0, BM);
    let (sq0, sq1) = (Shared::<T, BM, 64>::at(qa), Shared::<T, BM, D1>::at(qt));
    let kv = |stage: usize, which: usize| {
        let (a, t) = tiles(BM * D * 2 + (2 * stage + which) * BN * D * 2, BN);
        (Shared::<T, BN, 64>::at(a), Shared::<T, BN, D1>::at(t))
    };
    let copy_kv = |j: usize, which: usize| {
        let (main, rest) = kv(j % 2, which);
        copy_head(main, rest, TAIL, if which == 0 { kp } else { vp }, [lk, ldk, kvh * d, d], j * BN);
    };

    copy_head(sq0, sq1, TAIL, qp, [lq, ldq, h * d, d], r0);
    if blocks > 0 {
        copy_kv(0, 0);
    }
    commit_copies();
    if blocks > 0 {
        copy_kv(0, 1);
    }
    commit_copies();

    let mut stats = rustile::AccSoftmax::<BM, THREADS>::new(scale);
    let (mut o0, mut o1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
    for j in 0..blocks {
        // K of block j has landed (V of block j may still be in flight).
        wait_copies::<1>();
        wgmma::fence_shared();
        sync();
        if j + 1 < blocks {
            copy_kv(j + 1, 0);
        }
        commit_copies();
        let (k0t, k1t) = kv(j % 2, 0);
        let mut s = AccW::<BN>::zeros();
        wgmma::dot_async(&sq0, &k0t, &mut s);
        if TAIL {
            wgmma::dot_async(&sq1, &k1t, &mut s);
        }
        wgmma::wait::<0, BM, BN, THREADS>(&mut s);
        let c0 = j * BN;
        if c0 + BN > lk || (causal && c0 + BN > r0 + 1) {
            s = s.map(|r, c, x| if c0 + c >= lk || (causal && c0 + c > r0 + r) { f32::NEG_INFINITY } else { x });
        }
        let (p, alpha) = stats.step(s);
        let p = p.pack::<T>();
        o0 = o0.map_rows(&alpha, |x, a| x * a);
        if TAIL {
            o1 = o1.map_rows(&alpha, |x, a| x * a);
        }
        // V of block j has landed; stage j+1's V was last read by block j−1.
        wait_copies::<1>();
        wgmma::fence_shared();
        sync();
        if j + 1 < blocks {
            copy_kv(j + 1, 1);
        }
        commit_copies();
        let (v0t, v1t) = kv(j % 2, 1);
        wgmma::dot_acc_async(&p, &v0t, &mut o0);
        if TAIL {
            wgmma::dot_acc_async(&p, &v1t, &mut o1);
        }
        wgmma::wait::<0, BM, 64, THREADS>(&mut o0);
        if TAIL {
            wgmma::wait::<0, BM, D1, THREADS>(&mut o1);
        }
    }

    let inv_l = stats.inv_l();
    let (op, c0) = (o.offset(q0 * ldq), h * d);
    store_acc(&BlockPtr::<T, BM, 64>::new(op, [lq, c0 + d], [ldq, 1], [r0, c0]), &o0.map_rows(&inv_l, |x, i| x * i));
    if TAIL {
        store_acc(&BlockPtr::<T, BM, D1>::new(op, [lq, c0 + d], [ldq, 1], [r0, c0 + 64]), &o1.map_rows(&inv_l, |x, i| x * i));
    }
    let first = if varlen { q0 } else { z * heads * sq };
    stats.lse().store(lse.offset(first + h * lse_h), r0, lq);
}
