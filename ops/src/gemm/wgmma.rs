//! The GEMM on Hopper's warpgroup tensor cores (`wgmma`, sm_90a): the same
//! operands, epilogues and batching as [`gemm_nt_kernel`](super::gemm_nt_kernel),
//! with the tensor cores reading both tiles straight from shared memory and
//! running beside the copies (see `rustile::wgmma`).
use super::Operand;
use rustile::mma::acc_len;
use rustile::prelude::*;
use rustile::tma::{self, Barrier};
use rustile::wgmma;

/// `A·Bᵀ` for the `BM×BN` block of C at `at` (A `[m, k]`, B `[n, k]`, rows
/// `ld` apart), in the `wgmma` accumulator layout.
///
/// A ring of `STAGES` shared-memory stages; k-step `kt`:
/// 1. waits for its own copies, fences them for the tensor cores, and
///    meets the other threads at the barrier;
/// 2. starts its `wgmma`s (asynchronous);
/// 3. issues the copies of step `kt + STAGES − 2` into the stage step
///    `kt − 2` read, while the tensor cores work;
/// 4. waits until only this step's `wgmma`s run, so that after the next
///    barrier step `kt − 1`'s stage is free for every warpgroup.
///
/// So `STAGES − 2` steps of copies are in flight, and the tensor cores
/// always have the next step queued behind the barrier. Each stage is
/// `(BM + BN)·BK·2` bytes, from the byte offset that puts every tile on the
/// 1024-byte period of its swizzle (`PAD`).
#[inline(always)]
pub fn mainloop_wgmma<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize>(
    a: Operand<T>,
    b: Operand<T>,
    m: usize,
    n: usize,
    k: usize,
    at: [usize; 2],
) -> rustile::Acc<BM, BN, TH, true>
where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 3 } as usize]:,
{
    let stage = #[inline(always)]
    |s: usize| {
        let at = pad(TH) + s * (BM + BN) * BK * 2;
        (Shared::<T, BM, BK, TH>::at(at), Shared::<T, BN, BK, TH>::at(at + BM * BK * 2))
    };
    let steps = cdiv(k, BK);
    // Every step commits one group (empty past the last step), so that
    // `wait_copies` always counts the same number in flight.
    let fill = #[inline(always)]
    |kt: usize, s: usize| {
        if kt < steps {
            let (sa, sb) = stage(s);
            sa.copy_from(&BlockPtr::new(a.ptr, [m, k], [a.ld, 1], [at[0], kt * BK]));
            sb.copy_from(&BlockPtr::new(b.ptr, [n, k], [b.ld, 1], [at[1], kt * BK]));
        }
        commit_copies();
    };
    let next = |s: usize| if s + 1 == STAGES { 0 } else { s + 1 };
    for kt in 0..STAGES - 2 {
        fill(kt, kt);
    }
    let mut acc = rustile::Acc::<BM, BN, TH, true>::zeros();
    let (mut read, mut write) = (0, STAGES - 2);
    for kt in 0..steps {
        wait_copies::<{ STAGES as u32 - 3 }>();
        wgmma::fence_shared();
        sync();
        let (sa, sb) = stage(read);
        wgmma::dot_async(&sa, &sb, &mut acc);
        fill(kt + STAGES - 2, write);
        wgmma::wait::<1, BM, BN, TH>(&mut acc);
        (read, write) = (next(read), next(write));
    }
    wgmma::wait::<0, BM, BN, TH>(&mut acc);
    acc
}

/// Where the first stage goes: past the reduction scratch, on a 1024-byte boundary.
pub use rustile::wgmma::pad;

// `SMEM = pad(32·WARPS) + STAGES·(BM + BN)·BK·2` (the interpreter checks
// it). The last config shares an SM between two programs (`OCC = 2`), so
// one's epilogue overlaps the other's main loop.
#[kernel(
    configs = [
        (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 4, OCC = 1, SMEM = 196608),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 6, OCC = 1, SMEM = 196608),
        (BM = 64, BN = 256, BK = 64, WARPS = 4, STAGES = 5, OCC = 1, SMEM = 205312),
        (BM = 64, BN = 128, BK = 64, WARPS = 4, STAGES = 6, OCC = 1, SMEM = 147968),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 3, OCC = 2, SMEM = 98304),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN), batch],
    dtypes = [bf16, f16, (bf16, f32), (f16, f32), (bf16, F8E4M3)],
    arch = sm_90a,
)]
/// [`gemm_nt_kernel`](super::gemm_nt_kernel) on `wgmma`: A `[m, k]`, B
/// `[n, k]`, the same arguments.
pub fn gemm_wgmma_kernel<T: Elem, C: Elem>(
    a: Ptr<T>, b: Ptr<T>, c: PtrMut<C>, bias: Ptr<T>, residual: Ptr<T>, scale_c: Ptr<f32>, amax: PtrMut<f32>,
    m: usize, n: usize, k: usize, batch: usize, lda: usize, ldb: usize, ldc: usize,
    sa: usize, sb: usize, sc: usize, sbias: usize, alpha: f32, beta: f32, flags: u32,
) {
    let _ = batch; // the grid's second dimension
    let z = program_id(1);
    let at = crate::gemm::block::<BM, BN>(m, n);
    let (a, b) = (Operand { ptr: a.offset(z * sa), ld: lda }, Operand { ptr: b.offset(z * sb), ld: ldb });
    let acc = mainloop_wgmma::<T, BM, BN, BK, STAGES, THREADS>(a, b, m, n, k, at);
    let epi = crate::gemm::Epi::from_flags(flags, alpha, beta);
    let out = crate::gemm::Out::from_flags(flags, scale_c, amax);
    crate::gemm::store_epilogue(&acc, c, ldc, bias, residual, [m, n], [z, sc, sbias], at, epi, crate::gemm::Dequant::NONE, out, pad(THREADS));
}

// ---- with the copy engine --------------------------------------------------------------

/// An operand the copy engine (TMA) reads: the device address of its
/// tensor map (boxes of `rows×128 bytes`), which matrix `z` of the map's batch,
/// and the same matrix as a pointer (what the CPU interpreter copies from).
#[derive(Clone, Copy)]
pub struct Mapped<T> {
    pub map: u64,
    pub z: usize,
    pub op: Operand<T>,
}

/// `mainloop_tma`'s B operands, checked at compile time: its `wgmma` wait
/// counts one group per operand for one or two.
struct OneOrTwo<const NB: usize>;
impl<const NB: usize> OneOrTwo<NB> {
    const OK: () = assert!(NB == 1 || NB == 2, "mainloop_tma takes one or two B operands");
}

/// [`mainloop_wgmma`] with the tiles brought in by the copy engine, for
/// `A·Bᵢᵀ` against `NB` B operands at once (the dual GEMM's gate and up
/// weights share each A tile): A `[m, k]`, each Bᵢ `[n, k]`, of types that
/// `wgmma` multiplies together (the same 16-bit type, or FP8 of either
/// format each). The K edge and the block edges are zero-filled by the
/// hardware, and no thread computes a copy address.
///
/// Each of the `STAGES` stages (A's tile, then each Bᵢ's) has two
/// barriers: `full` completes when its tiles have landed, `empty` when
/// every thread has seen the `wgmma`s that read it finish. K-step `kt`
/// waits for `full`, starts its `wgmma`s, waits until only they run,
/// releases the stage of step `kt − 1`, and (one thread) refills that stage
/// with step `kt − 1 + STAGES` once `empty` says every warpgroup released
/// it. No barrier of the whole program, and `STAGES − 1` steps of copies in
/// flight. Needs `pad(TH) + STAGES·((BM + NB·BN)·BK·size + 16)` bytes of
/// `SMEM`, where a row of `BK` elements of `size` bytes is 128 bytes (BK 64
/// for bf16/f16, 128 for FP8).
#[inline(always)]
pub fn mainloop_tma<TA: Elem, TB: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const NB: usize>(
    a: Mapped<TA>,
    b: [Mapped<TB>; NB],
    mnk: [usize; 3],
    at: [usize; 2],
) -> [rustile::Acc<BM, BN, TH, true>; NB]
where
    [(); acc_len(BM, BN, TH)]:,
{
    let ring = Ring::<TA, TB, BM, BN, BK, STAGES, TH, NB>::new(TH as u32);
    let steps = cdiv(mnk[2], BK);
    for kt in 0..STAGES.min(steps) {
        ring.fill(a, &b, mnk, at, kt, false);
    }
    let mut acc = [rustile::Acc::<BM, BN, TH, true>::zeros(); NB];
    for kt in 0..steps {
        ring.multiply(kt, &mut acc);
        if kt > 0 {
            // Stage kt − 1 % STAGES, in its (kt − 1) / STAGES-th use: the barrier's phase parity.
            let (p, use_) = ((kt - 1) % STAGES, (kt - 1) / STAGES);
            ring.empty(p).arrive();
            if kt - 1 + STAGES < steps {
                ring.empty(p).wait_leader(use_ % 2);
                ring.fill(a, &b, mnk, at, kt - 1 + STAGES, false);
            }
        }
    }
    ring.finish(&mut acc);
    acc
}

/// [`mainloop_tma`] with a copy warpgroup: the program has `TH + 128`
/// threads; the first `TH` multiply and get the accumulators, the last
/// warpgroup never returns (it exits when its copies are issued: code
/// after the call is the multiplying threads' alone). One of its threads issues
/// every step's copies as soon as the step `STAGES` earlier released its
/// stage, so no multiplying warp ever waits to issue a copy and a
/// warpgroup running behind never holds back the other's next tiles. The
/// copy warpgroup gives its registers to the others (24 and 240 a thread:
/// two 64×N accumulators fit at the launch bound of 168). The same `SMEM`
/// as `mainloop_tma`.
#[inline(always)]
pub fn mainloop_tma_ws<TA: Elem, TB: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const NB: usize>(
    a: Mapped<TA>,
    b: [Mapped<TB>; NB],
    mnk: [usize; 3],
    at: [usize; 2],
) -> [rustile::Acc<BM, BN, TH, true>; NB]
where
    [(); acc_len(BM, BN, TH)]:,
{
    let ring = Ring::<TA, TB, BM, BN, BK, STAGES, TH, NB>::new(TH as u32);
    let steps = cdiv(mnk[2], BK);
    if wgmma::is_copier::<TH>() {
        wgmma::lower_registers::<24>();
        if wgmma::is_copy_issuer::<TH>() {
            for kt in 0..steps {
                let (s, use_) = (kt % STAGES, kt / STAGES);
                if use_ > 0 {
                    ring.empty(s).wait((use_ - 1) % 2);
                }
                ring.fill(a, &b, mnk, at, kt, true);
            }
        }
        wgmma::copier_done();
    }
    wgmma::raise_registers::<240>();
    let mut acc = [rustile::Acc::<BM, BN, TH, true>::zeros(); NB];
    for kt in 0..steps {
        // The interpreter's one thread is the copier too.
        if cfg!(not(target_arch = "nvptx64")) {
            ring.fill(a, &b, mnk, at, kt, true);
        }
        ring.multiply(kt, &mut acc);
        if kt > 0 {
            ring.empty((kt - 1) % STAGES).arrive();
        }
    }
    ring.finish(&mut acc);
    acc
}

/// The TMA main loop a config's `COPIER` knob picks: [`mainloop_tma`]
/// (0) or [`mainloop_tma_ws`] (1, with `TH + 128` threads).
#[inline(always)]
pub fn mainloop_tma_cfg<TA: Elem, TB: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const NB: usize, const COPIER: usize>(
    a: Mapped<TA>,
    b: [Mapped<TB>; NB],
    mnk: [usize; 3],
    at: [usize; 2],
) -> [rustile::Acc<BM, BN, TH, true>; NB]
where
    [(); acc_len(BM, BN, TH)]:,
{
    if COPIER == 1 {
        mainloop_tma_ws::<TA, TB, BM, BN, BK, STAGES, TH, NB>(a, b, mnk, at)
    } else {
        mainloop_tma::<TA, TB, BM, BN, BK, STAGES, TH, NB>(a, b, mnk, at)
    }
}

/// The shared memory of [`mainloop_tma`] and [`mainloop_tma_ws`] (and, with
/// no B, of the NVFP4 dual GEMM's A tiles): `STAGES`
/// stages, each A's `BM×BK` tile then each Bᵢ's `BN×BK` (from the byte
/// offset that puts every tile on its swizzle period, `pad(TH)`), then a
/// `full` barrier a stage (its copies landed) and an `empty` one (the
/// multiplying threads saw the `wgmma`s that read it finish).
pub(crate) struct Ring<TA, TB, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const NB: usize>(
    core::marker::PhantomData<(TA, TB)>,
);

impl<TA: Elem, TB: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const NB: usize>
    Ring<TA, TB, BM, BN, BK, STAGES, TH, NB>
{
    /// A's and B's rows are the same bytes (`wgmma` pairs 16-bit with 16-bit, 8 with 8).
    const ROW: usize = BK * core::mem::size_of::<TA>();
    const BYTES: usize = (BM + NB * BN) * Self::ROW;

    /// Sets up the barriers (`empty` counts `arrivals`) and meets every thread.
    #[inline(always)]
    pub(crate) fn new(arrivals: u32) -> Self {
        let ring = Ring(core::marker::PhantomData);
        for s in 0..STAGES {
            ring.full(s).init(1);
            ring.empty(s).init(arrivals);
        }
        tma::fence_init();
        sync();
        ring
    }

    #[inline(always)]
    pub(crate) fn a(&self, s: usize) -> Shared<TA, BM, BK, TH> {
        Shared::at(pad(TH) + s * Self::BYTES)
    }

    #[inline(always)]
    fn b(&self, s: usize, i: usize) -> Shared<TB, BN, BK, TH> {
        Shared::at(pad(TH) + s * Self::BYTES + (BM + i * BN) * Self::ROW)
    }

    #[inline(always)]
    pub(crate) fn full(&self, s: usize) -> Barrier {
        Barrier::at::<TH>(pad(TH) + STAGES * Self::BYTES + 8 * s)
    }

    #[inline(always)]
    pub(crate) fn empty(&self, s: usize) -> Barrier {
        Barrier::at::<TH>(pad(TH) + STAGES * Self::BYTES + 8 * (STAGES + s))
    }

    /// Starts k-step `kt`'s copies into its stage: by the program's copy
    /// leader ([`tma::leader`]), or (`by_this_thread`) by the caller; other
    /// threads return at once.
    #[inline(always)]
    pub(crate) fn fill(&self, a: Mapped<TA>, b: &[Mapped<TB>; NB], [m, n, k]: [usize; 3], at: [usize; 2], kt: usize, by_this_thread: bool) {
        if !(by_this_thread || tma::leader()) {
            return;
        }
        let (s, full) = (kt % STAGES, self.full(kt % STAGES));
        full.expect_by_this_thread(Self::BYTES);
        let a_src = BlockPtr::new(a.op.ptr, [m, k], [a.op.ld, 1], [at[0], kt * BK]);
        self.a(s).load_tma_by_this_thread(a.map, &a_src, a.z, &full);
        for (i, b) in b.iter().enumerate() {
            let b_src = BlockPtr::new(b.op.ptr, [n, k], [b.op.ld, 1], [at[1], kt * BK]);
            self.b(s, i).load_tma_by_this_thread(b.map, &b_src, b.z, &full);
        }
    }

    /// Waits for k-step `kt`'s tiles, starts its `wgmma`s, and waits until
    /// only they run (so step `kt − 1`'s stage is read).
    #[inline(always)]
    fn multiply(&self, kt: usize, acc: &mut [rustile::Acc<BM, BN, TH, true>; NB])
    where
        [(); acc_len(BM, BN, TH)]:,
    {
        let () = OneOrTwo::<NB>::OK;
        // Stage kt % STAGES, in its (kt / STAGES)-th use: the barrier's phase parity.
        let (s, use_) = (kt % STAGES, kt / STAGES);
        self.full(s).wait(use_ % 2);
        for (i, acc) in acc.iter_mut().enumerate() {
            wgmma::dot_async(&self.a(s), &self.b(s, i), acc);
        }
        // Each `dot_async` is one group: this step's NB may still run.
        for acc in acc.iter_mut() {
            if NB == 1 { wgmma::wait::<1, BM, BN, TH>(acc) } else { wgmma::wait::<2, BM, BN, TH>(acc) }
        }
    }

    /// Waits for the last step's `wgmma`s: the accumulators are final.
    #[inline(always)]
    fn finish(&self, acc: &mut [rustile::Acc<BM, BN, TH, true>; NB])
    where
        [(); acc_len(BM, BN, TH)]:,
    {
        for acc in acc.iter_mut() {
            wgmma::wait::<0, BM, BN, TH>(acc);
        }
    }
}

// `SMEM = pad(TH) + STAGES·((BM + BN)·BK·2 + 16)`, where `TH = 32·WARPS −
// 128·COPIER` threads multiply. `COPIER = 1`: a copy warpgroup
// ([`mainloop_tma_ws`]) beside two that multiply.
#[kernel(
    configs = [
        (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 4, COPIER = 0, SMEM = 196672),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 6, COPIER = 0, SMEM = 196704),
        (BM = 64, BN = 256, BK = 64, WARPS = 4, STAGES = 5, COPIER = 0, SMEM = 205392),
        (BM = 64, BN = 128, BK = 64, WARPS = 4, STAGES = 6, COPIER = 0, SMEM = 148064),
        (BM = 128, BN = 256, BK = 64, WARPS = 12, STAGES = 4, COPIER = 1, SMEM = 196672),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN), batch],
    dtypes = [bf16, f16, (bf16, f32), (f16, f32), (bf16, F8E4M3)],
    arch = sm_90a,
)]
/// [`gemm_wgmma_kernel`] with TMA copies: `map_a`, `map_b` are the device
/// addresses of A's and B's tensor maps (`[batch or 1, m, k]`, `[batch or 1,
/// n, k]`, boxes of `BM×64` and `BN×64`); a batch stride of 0 (shared
/// operand) reads matrix 0 of its map. C is bf16/f16 as the operands, f32,
/// or (from bf16) e4m3, scaled by `scale_c[0]` and its amax raised into
/// `amax[0]` as `flags` say ([`Out`](crate::gemm::Out)).
pub fn gemm_tma_kernel<T: Elem, C: Elem>(
    a: Ptr<T>, b: Ptr<T>, c: PtrMut<C>, bias: Ptr<T>, residual: Ptr<T>, scale_c: Ptr<f32>, amax: PtrMut<f32>,
    m: usize, n: usize, k: usize, batch: usize, lda: usize, ldb: usize, ldc: usize,
    sa: usize, sb: usize, sc: usize, sbias: usize, alpha: f32, beta: f32, flags: u32, map_a: u64, map_b: u64,
) {
    let _ = batch; // the grid's second dimension
    let z = program_id(1);
    let at = crate::gemm::block::<BM, BN>(m, n);
    // A batch stride of 0 is matrix 0 of a one-matrix map.
    let a = Mapped { map: map_a, z: if sa == 0 { 0 } else { z }, op: Operand { ptr: a.offset(z * sa), ld: lda } };
    let b = Mapped { map: map_b, z: if sb == 0 { 0 } else { z }, op: Operand { ptr: b.offset(z * sb), ld: ldb } };
    const TH: usize = THREADS - 128 * COPIER;
    let [acc] = mainloop_tma_cfg::<T, T, BM, BN, BK, STAGES, TH, 1, COPIER>(a, [b], [m, n, k], at);
    let epi = crate::gemm::Epi::from_flags(flags, alpha, beta);
    let out = crate::gemm::Out::from_flags(flags, scale_c, amax);
    crate::gemm::store_epilogue(&acc, c, ldc, bias, residual, [m, n], [z, sc, sbias], at, epi, crate::gemm::Dequant::NONE, out, pad(TH));
}
