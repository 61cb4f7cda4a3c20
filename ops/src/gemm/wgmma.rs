//! The GEMM on Hopper's warpgroup tensor cores (`wgmma`, sm_90a): the same
//! operands, epilogues and batching as [`gemm_nt_kernel`](super::gemm_nt_kernel),
//! with the tensor cores reading both tiles straight from shared memory and
//! running beside the copies (see `rustile::wgmma`).
use super::{block, store_epilogue, Epi, Operand};
use rustile::mma::acc_len;
use rustile::prelude::*;
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

/// Bytes between the reduction scratch (`4·TH`) and the first stage, so
/// that the stages start on a 1024-byte boundary.
pub const fn pad(th: usize) -> usize {
    (1024 - (th * 4) % 1024) % 1024
}

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
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
/// [`gemm_nt_kernel`](super::gemm_nt_kernel) on `wgmma`: A `[m, k]`, B
/// `[n, k]`, the same arguments.
pub fn gemm_wgmma_kernel<T: Elem>(
    a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, bias: Ptr<T>, residual: Ptr<T>,
    m: usize, n: usize, k: usize, batch: usize, lda: usize, ldb: usize, ldc: usize,
    sa: usize, sb: usize, sc: usize, sbias: usize, alpha: f32, beta: f32, flags: u32,
) {
    let _ = batch; // the grid's second dimension
    let z = program_id(1);
    let at = block::<BM, BN>(m, n);
    let (a, b) = (Operand { ptr: a.offset(z * sa), ld: lda }, Operand { ptr: b.offset(z * sb), ld: ldb });
    let acc = mainloop_wgmma::<T, BM, BN, BK, STAGES, THREADS>(a, b, m, n, k, at);
    store_epilogue(&acc, c, ldc, bias, residual, [m, n], [z, sc, sbias], at, Epi::from_flags(flags, alpha, beta));
}
