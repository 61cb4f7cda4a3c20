//! Flash attention forward on Hopper (sm_90a): [`super::attention_fwd_kernel`]'s
//! program with both products on the warpgroup tensor cores (`wgmma`).
//!
//! Each warpgroup takes 64 query rows: two of a 128-row block, or at D = 80
//! one alone, three programs a SM (short sequences, as a vision encoder's
//! 256 tokens, then have four times the programs to hide each one's first
//! loads behind the others' products: 174 TFLOP/s there against 158 with
//! 128 rows, bench/RESULTS.md). `S = Q·Kᵀ`
//! reads Q and K straight from shared memory; `O += P·V` takes `P` from the
//! registers the softmax left it in and V from shared memory, N-major (V's
//! rows are keys). `wgmma` reads rows of at most 128 bytes, so a head is
//! stored as 64-column tiles: one at D = 64, two at 128, and 64 plus a tile
//! of 16 or 32 columns at 72/80 and 96.
use rustile::prelude::*;

/// One block of `BM` query rows of one head, as [`super::attention_fwd_kernel`]
/// (the same arguments).
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 128, WARPS = 8, OCC = 1, SMEM = 81920),
        (D = 80, BM = 64, BN = 64, WARPS = 4, OCC = 3, SMEM = 51712),
        (D = 96, BM = 128, BN = 128, WARPS = 8, OCC = 1, SMEM = 122880),
        (D = 128, BM = 128, BN = 128, WARPS = 8, OCC = 1, SMEM = 163840),
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
    // Here, not at the top: on other arches the macro leaves the body out.
    use crate::attention::{store_head, Head, Seq, CAUSAL, VARLEN};
    use rustile::wgmma;
    // A head as a 64-column tile and, past 64, a second one of D1 columns
    // (otherwise D1 names an unused tile).
    const TAIL: bool = D > 64;
    const D1: usize = if TAIL { D - 64 } else { 64 };
    type AccW<const N: usize> = rustile::Acc<BM, N, THREADS, true>;
    type Rows<const R: usize> = Head<T, R, 64, D1, THREADS>;

    let (qb, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let r0 = qb * BM;
    if r0 >= s.lq {
        return;
    }
    let kvh = h / (heads / kv_heads);
    let (kp, vp) = (k.offset(s.k_at()), v.offset(s.k_at()));
    let blocks = s.key_blocks(r0, BM, BN, causal);

    // Shared memory: Q, then two stages of K and V; every tile starts on a
    // multiple of 1024 bytes (the swizzle period wgmma's descriptors assume).
    let at = wgmma::pad(THREADS);
    let sq_ = Rows::<BM>::at(at, TAIL);
    let kv = |stage: usize, which: usize| Rows::<BN>::at(at + BM * D * 2 + (2 * stage + which) * BN * D * 2, TAIL);
    let copy_kv = |j: usize, which: usize| kv(j % 2, which).copy_from(if which == 0 { kp } else { vp }, [s.lk, s.ldk, kvh * d, d], j * BN);

    sq_.copy_from(q.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0);
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
        let kt = kv(j % 2, 0);
        let mut sc = AccW::<BN>::zeros();
        wgmma::dot_async(&sq_.main, &kt.main, &mut sc);
        if TAIL {
            wgmma::dot_async(&sq_.rest, &kt.rest, &mut sc);
        }
        wgmma::wait::<0, BM, BN, THREADS>(&mut sc);
        let c0 = j * BN;
        if c0 + BN > s.lk || (causal && c0 + BN > r0 + 1) {
            sc = sc.map(|r, c, x| if c0 + c >= s.lk || (causal && c0 + c > r0 + r) { f32::NEG_INFINITY } else { x });
        }
        let (p, alpha) = stats.step(sc);
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
        let vt = kv(j % 2, 1);
        wgmma::dot_acc_async(&p, &vt.main, &mut o0);
        if TAIL {
            wgmma::dot_acc_async(&p, &vt.rest, &mut o1);
        }
        wgmma::wait::<0, BM, 64, THREADS>(&mut o0);
        if TAIL {
            wgmma::wait::<0, BM, D1, THREADS>(&mut o1);
        }
    }
    let inv_l = stats.inv_l();
    let out = [s.lq, s.ldq, h * d, d];
    store_head(o.offset(s.q_at()), out, r0, &o0.map_rows(&inv_l, |x, i| x * i), &o1.map_rows(&inv_l, |x, i| x * i), TAIL, 1.0);
    stats.lse().store(lse.offset(s.lse0 + h * lse_h), r0, s.lq);
}
