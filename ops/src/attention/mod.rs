//! Flash attention, forward: `O = softmax(scale·Q·Kᵀ + mask)·V` with the
//! online softmax, saving each row's log-sum-exp for the backward pass.
//!
//! Tensors are token-major, as the projections write them: `q` and `o`
//! `[batch, sq, heads, d]`, `k` and `v` `[batch, sk, kv_heads, d]` (bf16 or
//! f16; f32 accumulation). Options:
//!
//! - any lengths (edges masked), head dims 64, 72, 96 and 128 (72 and 96 are
//!   padded to a multiple of 16 in shared memory only: the copies zero-fill
//!   the columns past `d`, and the stores skip them);
//! - causal, aligned top-left as PyTorch's `is_causal` (query `i` sees keys
//!   `j ≤ i`), also when `sq ≠ sk`;
//! - rectangular: `sk` may be shorter than `sq`, and [`Attention::keys`] uses
//!   only the first keys of longer `k`, `v` tensors (queries of `M+N` points
//!   attending to the `M` context points) without any mask in memory;
//! - grouped-query attention: `heads` a multiple of `kv_heads`, query head
//!   `h` reads key/value head `h / (heads / kv_heads)`;
//! - variable lengths: sequences packed back to back (`[tokens, heads, d]`)
//!   with cumulative offsets ([`SeqLens`]).
//!
//! A program takes `BM` query rows of one head (the grid is query blocks ×
//! heads × sequences). It keeps Q in shared memory and walks the key blocks
//! `BN` at a time: `S = Q·Kᵀ` on the tensor cores, the online softmax on
//! `S`'s rows (each warp holds whole rows, so a row's maximum and sum are
//! two shuffles), then `O = α·O + P·V` with `P` straight from registers
//! (`dot_acc`). K and V of the next block load while this one multiplies.
use rustile::prelude::*;

// ---- copies -----------------------------------------------------------------------------

/// Rows `r0..r0+R` of one head (`rows` rows `ld` elements apart, its `d`
/// columns from column `c0`) into shared memory: columns `0..D0` into
/// `main`, and when `tail` the next `D1` into `rest`, zero past `d`. A head dim that is not a power
/// of two is two tiles, so that each keeps a swizzle the `ldmatrix`
/// addressing and bank spread rely on.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn copy_head<T: Elem, const R: usize, const D0: usize, const D1: usize, const TH: usize>(
    main: Shared<T, R, D0, TH>,
    rest: Shared<T, R, D1, TH>,
    tail: bool,
    src: Ptr<T>,
    [rows, ld, c0, d]: [usize; 4],
    r0: usize,
) {
    main.copy_from(&rustile::BlockPtr::new(src, [rows, c0 + d], [ld, 1], [r0, c0]));
    if tail {
        rest.copy_from(&rustile::BlockPtr::new(src, [rows, c0 + d], [ld, 1], [r0, c0 + D0]));
    }
}

/// Where sequence `z` starts and how long it is, in queries and keys:
/// `(q0, lq, k0, lk)` (see [`attention_fwd_kernel`] for the arguments).
#[inline(always)]
fn sequence(z: usize, cu_q: Ptr<u32>, cu_k: Ptr<u32>, [sq, sk, q_bs, kv_bs]: [usize; 4], varlen: bool) -> (usize, usize, usize, usize) {
    if varlen {
        let (q0, k0) = (cu_q.read(z) as usize, cu_k.read(z) as usize);
        (q0, cu_q.read(z + 1) as usize - q0, k0, cu_k.read(z + 1) as usize - k0)
    } else {
        (z * q_bs, sq, z * kv_bs, sk)
    }
}

// ---- the forward kernel -------------------------------------------------------------------

/// `flags` bits of [`attention_fwd_kernel`].
pub const CAUSAL: u32 = 1;
pub const VARLEN: u32 = 2;

/// One block of `BM` query rows of one head. `D` is the head dim padded to
/// a multiple of 16 (64, 80, 96 or 128); `d` the real one.
///
/// Sequence `z = program_id(2)` starts at token `z·q_bs` of `q` and `z·kv_bs`
/// of `k`, `v`, and has `sq`, `sk` tokens; with `VARLEN` it starts at
/// `cu_q[z]`, `cu_k[z]` and ends at the next entry. `lse[h·lse_h + t]` is
/// query token `t`'s log-sum-exp (`t` counted from the sequence's first
/// token `z·heads·sq`, or `cu_q[z]`).
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 64, WARPS = 4, SMEM = 49152),
        (D = 80, BM = 128, BN = 64, WARPS = 4, SMEM = 61440),
        (D = 96, BM = 128, BN = 64, WARPS = 4, SMEM = 73728),
        (D = 128, BM = 128, BN = 32, WARPS = 4, SMEM = 65536),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
)]
pub fn attention_fwd_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, o: PtrMut<T>, lse: PtrMut<f32>, cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
) {
    // The head dim as one or two shared tiles (see `copy_head`): D0 columns,
    // then D1 more when D is not D0 (otherwise D1 names an unused tile).
    const D0: usize = if D >= 128 { 128 } else { 64 };
    const TAIL: bool = D > D0;
    const D1: usize = if TAIL { D - D0 } else { 32 };
    type AccW<const N: usize> = rustile::Acc<BM, N, THREADS, true>;

    let (qb, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch; // the grid
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let (q0, lq, k0, lk) = sequence(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs], varlen);
    let r0 = qb * BM;
    if r0 >= lq {
        return; // a shorter sequence of a variable-length batch
    }
    let kvh = h / (heads / kv_heads);
    let (ldq, ldk) = (heads * d, kv_heads * d);
    // The sequence's first rows; a head is a column window of them (an
    // offset to the head itself would pass the end of a sequence with no keys).
    let (qp, kp, vp) = (q.offset(q0 * ldq), k.offset(k0 * ldk), v.offset(k0 * ldk));
    // Causal: keys past the block's last row are never seen.
    let blocks = if causal { cdiv(lk.min(r0 + BM), BN) } else { cdiv(lk, BN) };

    // Shared memory: Q, then two stages of K and V, each D columns (two
    // tiles; without a tail the unused one aliases the first).
    let tiles = |at: usize, rows: usize| (at, if TAIL { at + rows * D0 * 2 } else { at });
    let (qa, qt) = tiles(0, BM);
    let kv_at = |stage: usize, which: usize| BM * D * 2 + (2 * stage + which) * BN * D * 2;
    let (sq0, sq1) = (Shared::<T, BM, D0>::at(qa), Shared::<T, BM, D1>::at(qt));
    let kv = |stage: usize, which: usize| {
        let (a, t) = tiles(kv_at(stage, which), BN);
        (Shared::<T, BN, D0>::at(a), Shared::<T, BN, D1>::at(t))
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
    let (mut o0, mut o1) = (AccW::<D0>::zeros(), AccW::<D1>::zeros());
    for j in 0..blocks {
        // K of block j has landed (V of block j may still be in flight).
        wait_copies::<1>();
        sync();
        // Stage j+1 was last read by block j−1, which every thread finished before the barrier.
        if j + 1 < blocks {
            copy_kv(j + 1, 0);
        }
        commit_copies();
        let (k0t, k1t) = kv(j % 2, 0);
        let mut s = dot(&sq0, &k0t, AccW::<BN>::zeros());
        if TAIL {
            s = dot(&sq1, &k1t, s);
        }
        // Only a block that crosses the key edge or the diagonal needs a mask.
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
        sync();
        if j + 1 < blocks {
            copy_kv(j + 1, 1);
        }
        commit_copies();
        let (v0t, v1t) = kv(j % 2, 1);
        o0 = dot_acc(&p, &v0t, o0);
        if TAIL {
            o1 = dot_acc(&p, &v1t, o1);
        }
    }

    let inv_l = stats.inv_l();
    let (op, c0) = (o.offset(q0 * ldq), h * d);
    store_acc(&BlockPtr::<T, BM, D0>::new(op, [lq, c0 + d], [ldq, 1], [r0, c0]), &o0.map_rows(&inv_l, |x, i| x * i));
    if TAIL {
        store_acc(&BlockPtr::<T, BM, D1>::new(op, [lq, c0 + d], [ldq, 1], [r0, c0 + D0]), &o1.map_rows(&inv_l, |x, i| x * i));
    }
    let first = if varlen { q0 } else { z * heads * sq };
    stats.lse().store(lse.offset(first + h * lse_h), r0, lq);
}

// ---- the forward on Hopper ----------------------------------------------------------------

mod hopper;
pub use hopper::*;

// ---- the backward kernels -----------------------------------------------------------------

mod backward;
pub use backward::*;

// ---- host API ----------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
