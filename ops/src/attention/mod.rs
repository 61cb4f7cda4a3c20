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

// ---- shared by the kernels ---------------------------------------------------------------

/// `R` rows of one head in shared memory: its first `D0` columns in `main`
/// and, when the head is wider (`tail`), the next `D1` in `rest`. A head
/// dim that is not a power of two is two tiles so that each keeps a swizzle
/// `ldmatrix` and `wgmma` read (one tile of 80 columns could not); without
/// a tail `rest` aliases `main` and is never read.
#[derive(Clone, Copy)]
struct Head<T, const R: usize, const D0: usize, const D1: usize, const TH: usize> {
    main: Shared<T, R, D0, TH>,
    rest: Shared<T, R, D1, TH>,
    tail: bool,
}

impl<T: Elem, const R: usize, const D0: usize, const D1: usize, const TH: usize> Head<T, R, D0, D1, TH> {
    /// At byte `at` of the program's shared memory, the tail right after the main tile.
    #[inline(always)]
    fn at(at: usize, tail: bool) -> Self {
        Head { main: Shared::at(at), rest: Shared::at(if tail { at + R * D0 * 2 } else { at }), tail }
    }

    /// Rows `r0..r0+R` of one head (`rows` rows `ld` elements apart, its `d`
    /// columns from column `c0`), zero past `d` and past the last row.
    #[inline(always)]
    fn copy_from(&self, src: Ptr<T>, [rows, ld, c0, d]: [usize; 4], r0: usize) {
        self.main.copy_from(&BlockPtr::new(src, [rows, c0 + d], [ld, 1], [r0, c0]));
        if self.tail {
            self.rest.copy_from(&BlockPtr::new(src, [rows, c0 + d], [ld, 1], [r0, c0 + D0]));
        }
    }

    /// [`Head::copy_from`] by Hopper's copy engine: rows `r0..r0+R` of head
    /// `head` of a token-major tensor (`rows` tokens `ld` elements apart,
    /// heads of `d` columns) through `maps`, its boxes of `R×D0` and `R×D1`
    /// (`host::head_maps`). One thread issues both copies; they land on
    /// `bar`, which expects [`Head::bytes`]. Columns past `d` are zero; rows
    /// past `rows` are zero on the CPU, but on the GPU the copy engine goes on
    /// into the next tokens (zero only past the tensor's end), so the
    /// caller masks or zeroes them. The program's copy leader
    /// ([`rustile::tma::leader`]) issues, or, `by_this_thread`, the caller
    /// (a copy warpgroup's issuing thread).
    // Only the Hopper kernels (sm_90a and the interpreter) use this and the two below.
    #[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn load_tma(&self, maps: [u64; 2], src: Ptr<T>, [rows, ld, head, d]: [usize; 4], r0: usize, bar: &rustile::tma::Barrier, by_this_thread: bool) {
        // The window the map describes (the interpreter copies it): the head's columns, from c0.
        fn window<T: Elem, const R: usize, const C: usize, const TH: usize>(src: Ptr<T>, [rows, ld, head, d]: [usize; 4], r0: usize, c0: usize) -> BlockPtr<T, R, C, TH> {
            BlockPtr::new(src.offset(head * d), [rows, d], [ld, 1], [r0, c0])
        }
        if !(by_this_thread || rustile::tma::leader()) {
            return;
        }
        let at = [rows, ld, head, d];
        self.main.load_tma_by_this_thread(maps[0], &window(src, at, r0, 0), head, bar);
        if self.tail {
            self.rest.load_tma_by_this_thread(maps[1], &window(src, at, r0, D0), head, bar);
        }
    }

    /// The bytes [`Head::load_tma`] lands: whole boxes, zeros included.
    #[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
    #[inline(always)]
    fn bytes(&self) -> usize {
        R * (D0 + if self.tail { D1 } else { 0 }) * 2
    }

    /// Zeroes rows `first..R` of both tiles (see `Shared::zero_rows_from`).
    #[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
    #[inline(always)]
    fn zero_rows_from(&self, first: usize) {
        self.main.zero_rows_from(first);
        if self.tail {
            self.rest.zero_rows_from(first);
        }
    }
}

/// `acc + a·bᵀ` over a head's columns on `mma.sync` (both tiles).
#[inline(always)]
fn dot_head<T: Elem, const M: usize, const N: usize, const D0: usize, const D1: usize, const TH: usize>(
    a: &Head<T, M, D0, D1, TH>,
    b: &Head<T, N, D0, D1, TH>,
    acc: rustile::Acc<M, N, TH, true>,
) -> rustile::Acc<M, N, TH, true>
where
    [(); rustile::mma::acc_len(M, N, TH)]:,
{
    let acc = dot(&a.main, &b.main, acc);
    if a.tail { dot(&a.rest, &b.rest, acc) } else { acc }
}

/// Rows `r0..r0+R` of one head of `dst` (`rows` rows `ld` elements apart,
/// its `d` columns from column `c0`), times `scale`: `main` its first `D0`
/// columns and, with `tail`, `rest` the next `D1`; nothing past `d` or the
/// last row.
///
/// Staged through the first `4·R·D0` bytes of shared memory (the main
/// loop's tiles, free by now: a program with no key block may still have
/// its first copies landing there, hence the wait; each staged store's
/// first barrier waits for the previous one's readers), so that each warp
/// stores whole rows in 16-byte pieces: straight from the accumulator
/// layout a thread has 4 bytes a row, and every sector would be written in
/// four partial pieces.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn store_head<T: Elem, const R: usize, const D0: usize, const D1: usize, const TH: usize>(
    dst: PtrMut<T>,
    [rows, ld, c0, d]: [usize; 4],
    r0: usize,
    main: &rustile::Acc<R, D0, TH, true>,
    rest: &rustile::Acc<R, D1, TH, true>,
    tail: bool,
    scale: f32,
) where
    [(); rustile::mma::acc_len(R, D0, TH)]:,
    [(); rustile::mma::acc_len(R, D1, TH)]:,
{
    wait_copies::<0>();
    let scaled = |_, _, x: [f32; 8]| x.map(|v| v * scale);
    store_acc_staged(&BlockPtr::new(dst, [rows, c0 + d], [ld, 1], [r0, c0]), main, 0, scaled);
    if tail {
        store_acc_staged(&BlockPtr::new(dst, [rows, c0 + d], [ld, 1], [r0, c0 + D0]), rest, 0, scaled);
    }
}

/// The copy warpgroup of a warp-specialized program (Hopper's forwards,
/// bf16 and FP8, and the dK/dV backward): it gives its registers to the
/// multiplying ones, its first thread issues the program's fixed tiles
/// (`first`: the forward's Q, the backward's K and V), then step j's two
/// tiles (`step(j, which)`: K and V of key block j, or Q and dO of query
/// block j) as soon as every multiplying thread has released the stage's
/// previous ones (`released(j, which)`, which completes once a use of
/// stage `j % stages`), and it leaves. Other threads return at once. With
/// `WARP`, the whole first warp runs `first` and `step` (which then issue
/// their TMA copies from its first thread only, `wgmma::is_copy_issuer`),
/// for the per-step vectors its lanes copy beside the tiles.
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
#[inline(always)]
fn copy_warpgroup<const TH: usize, const WARP: bool>(
    steps: usize,
    stages: usize,
    first: impl Fn(),
    step: impl Fn(usize, usize),
    released: impl Fn(usize, usize) -> rustile::tma::Barrier,
) {
    use rustile::wgmma;
    if !wgmma::is_copier::<TH>() {
        return;
    }
    wgmma::lower_registers::<24>();
    let runs_loop = if WARP { wgmma::is_copy_warp::<TH>() } else { wgmma::is_copy_issuer::<TH>() };
    if runs_loop {
        first();
        for j in 0..steps {
            for which in 0..2 {
                if j >= stages {
                    released(j, which).wait((j / stages - 1) % 2);
                }
                step(j, which);
            }
        }
    }
    wgmma::copier_done();
}

/// One sequence of the batch as a program sees it: its queries start at
/// token `q0` (`lq` of them), its keys at `k0` (`lk`); rows are `ldq`
/// (`ldk`) elements apart; its first log-sum-exp is `lse0` (the kernels'
/// arguments are [`attention_fwd_kernel`]'s).
#[derive(Clone, Copy)]
struct Seq {
    q0: usize,
    lq: usize,
    k0: usize,
    lk: usize,
    ldq: usize,
    ldk: usize,
    lse0: usize,
}

impl Seq {
    /// Sequence `z`: the fixed-length layout, or with `varlen` the
    /// cumulative offsets `cu_q`, `cu_k`, with `q_bs`, `kv_bs` the packed
    /// query and key tokens. The offsets may be the caller's, never read on
    /// the host, so they are cut to those totals (and a sequence never ends
    /// before it starts): wrong ones give wrong rows, not accesses past the
    /// tensors.
    #[inline(always)]
    fn of(z: usize, cu_q: Ptr<u32>, cu_k: Ptr<u32>, [sq, sk, q_bs, kv_bs, heads, kv_heads, d]: [usize; 7], varlen: bool) -> Seq {
        let (ldq, ldk) = (heads * d, kv_heads * d);
        if varlen {
            let span = |cu: Ptr<u32>, total: usize| {
                let first = (cu.read(z) as usize).min(total);
                (first, (cu.read(z + 1) as usize).clamp(first, total) - first)
            };
            let ((q0, lq), (k0, lk)) = (span(cu_q, q_bs), span(cu_k, kv_bs));
            Seq { q0, lq, k0, lk, ldq, ldk, lse0: q0 }
        } else {
            Seq { q0: z * q_bs, lq: sq, k0: z * kv_bs, lk: sk, ldq, ldk, lse0: z * heads * sq }
        }
    }

    /// Elements before the sequence's first query row (of `q`, `o`, `do`)
    /// and first key row (of `k`, `v`); a head is a column window of the
    /// rows (an offset to the head itself would pass the end of a sequence
    /// with no keys).
    #[inline(always)]
    fn q_at(&self) -> usize {
        self.q0 * self.ldq
    }
    #[inline(always)]
    fn k_at(&self) -> usize {
        self.k0 * self.ldk
    }

    /// Key blocks of `bn` that queries `r0..r0+bm` read (causal: none past the block's last row).
    #[inline(always)]
    fn key_blocks(&self, r0: usize, bm: usize, bn: usize, causal: bool) -> usize {
        cdiv(if causal { self.lk.min(r0 + bm) } else { self.lk }, bn)
    }
}

/// The query block that program `pid` of a grid of `cdiv(sq, bm)` runs.
/// Causal grids run the last first: it reads the most key blocks, and the
/// grid launches in order, so the lightest programs fill the last wave
/// instead of the heaviest.
#[inline(always)]
pub(crate) fn query_block(pid: usize, sq: usize, bm: usize, causal: bool) -> usize {
    if causal { cdiv(sq, bm) - 1 - pid } else { pid }
}

/// The key rows a dK/dV grid spans: every row of `dk` (those past the keys
/// used get zeros), or with [`VARLEN`] the longest sequence's keys (`kv_bs`
/// is then all the packed keys).
#[cfg_attr(target_arch = "nvptx64", allow(dead_code))] // grids are sized on the host
pub(crate) fn key_rows(sk: usize, kv_bs: usize, flags: u32) -> usize {
    if flags & VARLEN != 0 { sk } else { sk.max(kv_bs) }
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
/// `cu_q[z]`, `cu_k[z]` and ends at the next entry, `sq` is the longest
/// sequence's queries, and `q_bs`, `kv_bs` are all the queries and keys. `lse[h·lse_h + t]` is
/// query token `t`'s log-sum-exp (`t` counted from the sequence's first
/// token `z·heads·sq`, or `cu_q[z]`).
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 64, WARPS = 4, OCC = 1, SMEM = 49152),
        (D = 80, BM = 128, BN = 64, WARPS = 4, OCC = 1, SMEM = 61440),
        (D = 96, BM = 128, BN = 64, WARPS = 4, OCC = 1, SMEM = 73728),
        (D = 128, BM = 128, BN = 32, WARPS = 4, OCC = 1, SMEM = 65536),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
)]
pub fn attention_fwd_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, o: PtrMut<T>, lse: PtrMut<f32>, cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
) {
    // The head dim as one or two shared tiles (see `Head`): D0 columns,
    // then D1 more when D is not D0 (otherwise D1 names an unused tile).
    const D0: usize = if D >= 128 { 128 } else { 64 };
    const TAIL: bool = D > D0;
    const D1: usize = if TAIL { D - D0 } else { 32 };
    type AccW<const N: usize> = rustile::Acc<BM, N, THREADS, true>;
    type Rows<const R: usize> = Head<T, R, D0, D1, THREADS>;

    let (h, z) = (program_id(1), program_id(2));
    let _ = batch; // the grid
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let qb = query_block(program_id(0), sq, BM, causal);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let r0 = qb * BM;
    if r0 >= s.lq {
        return; // a shorter sequence of a variable-length batch
    }
    let kvh = h / (heads / kv_heads);
    let (kp, vp) = (k.offset(s.k_at()), v.offset(s.k_at()));
    let blocks = s.key_blocks(r0, BM, BN, causal);

    // Shared memory: Q, then two stages of K and V, each D columns.
    let sq_ = Rows::<BM>::at(0, TAIL);
    let kv = |stage: usize, which: usize| Rows::<BN>::at(BM * D * 2 + (2 * stage + which) * BN * D * 2, TAIL);
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
        let mut sc = dot_head(&sq_, &kv(j % 2, 0), AccW::<BN>::zeros());
        // Only a block that crosses the key edge or the diagonal needs a mask.
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
        sync();
        if j + 1 < blocks {
            copy_kv(j + 1, 1);
        }
        commit_copies();
        let vt = kv(j % 2, 1);
        o0 = dot_acc(&p, &vt.main, o0);
        if TAIL {
            o1 = dot_acc(&p, &vt.rest, o1);
        }
    }
    let inv_l = stats.inv_l();
    let out = [s.lq, s.ldq, h * d, d];
    store_head(o.offset(s.q_at()), out, r0, &o0.map_rows(&inv_l, |x, i| x * i), &o1.map_rows(&inv_l, |x, i| x * i), TAIL, 1.0);
    stats.lse().store(lse.offset(s.lse0 + h * lse_h), r0, s.lq);
}

// ---- the forward on Hopper ----------------------------------------------------------------

mod hopper;
pub use hopper::*;

// ---- the FP8 forward on Hopper ------------------------------------------------------------

mod fp8;
pub use fp8::*;

// ---- the backward kernels -----------------------------------------------------------------

mod backward;
pub use backward::*;

mod hopper_backward;
pub use hopper_backward::*;

// ---- host API ----------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
