//! The NVFP4 dual GEMM on GPUs without FP4 tensor cores (Hopper):
//! `C = silu(A·B₁ᵀ) ⊙ (A·B₂ᵀ)` with A `[M, K]`, B₁ and B₂ `[N, K]` in NVFP4
//! (E2M1 values two to a byte, element `2i` in the low nibble, one E4M3
//! scale per 16 values along K) and C `[M, N]` fp16.
//!
//! Principles:
//! * **Decode exactly, multiply in 16 bits.** An E2M1 value times an E4M3
//!   scale has at most five significant bits and lies within fp16's range,
//!   so each program decodes its tiles into fp16 in shared memory, scale
//!   folded in, with no rounding, and the 16-bit tensor cores do the rest
//!   (f32 accumulation). The result is the product of the dequantized
//!   operands, as the task defines it.
//! * **Decode once a program.** A program decodes its A tile once for both
//!   products (the dual GEMM's point) and each B tile once; decoding is
//!   integer work of a few instructions an element, a word of eight values
//!   and a scale byte at a time.
//! * **Plain layouts.** The kernel reads packed rows `[rows, K/2]` as words
//!   of eight values and scales `[rows, K/16]` in the plain layout
//!   ([`crate::nvfp4`]: the formats, decoding, and the conversion from
//!   cuBLAS's blocked scale layout, done once, as for weights).
use crate::gemm::block;
use crate::nvfp4::decoded;
use rustile::prelude::*;

/// An NVFP4 operand as the kernels read it: values as words of eight, scales.
type Fp4 = (Ptr<u32>, Ptr<F8E4M3>);

/// The K loop of products of NVFP4 operands: each step decodes the program's
/// tile of `a` (rows `at[0]..`) and of every `b` (rows `at[1]..`) into
/// shared memory (from byte 0: A, then each B), then calls `step(ta, tbs, ks)`
/// for each 16-deep slice.
#[inline(always)]
fn k_loop<T: Elem, const BM: usize, const BN: usize, const BK: usize, const TH: usize, const NB: usize>(
    (a, sa): Fp4, bs: [Fp4; NB], [m, n, k]: [usize; 3], at: [usize; 2], mut step: impl FnMut(&Shared<T, BM, BK, TH>, &[Shared<T, BN, BK, TH>; NB], usize),
) where
    [(); rustile::len(BM, BK, TH)]:,
    [(); rustile::len(BN, BK, TH)]:,
{
    let ta = Shared::<T, BM, BK, TH>::at(0);
    let tbs = core::array::from_fn(|i| Shared::<T, BN, BK, TH>::at((BM + i * BN) * BK * 2));
    for kt in 0..k / BK {
        ta.store(&decoded::<T, BM, BK, TH>(a, sa, m, k, [at[0], kt * BK]));
        for (tb, &(b, sb)) in tbs.iter().zip(&bs) {
            tb.store(&decoded::<T, BN, BK, TH>(b, sb, n, k, [at[1], kt * BK]));
        }
        sync();
        for ks in 0..BK / 16 {
            step(&ta, &tbs, ks);
        }
        // Every thread has read this step's tiles before the next overwrites them.
        sync();
    }
}

// `SMEM ≥ (BM + 2·BN)·BK·2` (one stage of the decoded A, B₁, B₂) and
// `≥ 4·BM·BN` (the staged store of C). 128×128 by 8 warps and 64×64 by 4
// spilled once the decode's loads were all in flight together.
#[kernel(
    configs = [
        (BM = 128, BN = 64, BK = 64, WARPS = 8, SMEM = 32768),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
)]
/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` of NVFP4 operands: `a` `[m, k/8]` words,
/// `sa` `[m, k/16]` scales, likewise `b1`, `sb1`, `b2`, `sb2` with `n` rows;
/// `k` a multiple of 64.
pub fn dual_gemm_nvfp4_kernel<T: Elem>(
    a: Ptr<u32>, sa: Ptr<F8E4M3>, b1: Ptr<u32>, sb1: Ptr<F8E4M3>, b2: Ptr<u32>, sb2: Ptr<F8E4M3>, c: PtrMut<T>, m: usize, n: usize, k: usize,
) {
    let at = block::<BM, BN>(m, n);
    let (mut gate, mut up) = (Acc::<BM, BN>::zeros(), Acc::<BM, BN>::zeros());
    k_loop::<T, BM, BN, BK, THREADS, 2>((a, sa), [(b1, sb1), (b2, sb2)], [m, n, k], at, |ta, [tb1, tb2], ks| {
        let fa = FragA::load(ta, ks);
        gate = mma(&fa, &FragB::load(tb1, ks), gate);
        up = mma(&fa, &FragB::load(tb2, ks), up);
    });
    let h = gate.zip(up, |g, u| math::silu(g) * u);
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &h, 0, |_, _, x: [f32; 8]| x);
}

// One accumulator a program: 128×128 fits (`SMEM ≥ (BM + BN)·BK·2, 4·BM·BN`).
#[kernel(
    configs = [
        (BM = 64, BN = 64, BK = 64, WARPS = 4, SMEM = 16384),
        (BM = 128, BN = 64, BK = 64, WARPS = 8, SMEM = 32768),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, SMEM = 65536),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
)]
/// `c = a·bᵀ` of NVFP4 operands (as [`dual_gemm_nvfp4_kernel`]'s), fp16 out.
pub fn gemm_nvfp4_kernel<T: Elem>(a: Ptr<u32>, sa: Ptr<F8E4M3>, b: Ptr<u32>, sb: Ptr<F8E4M3>, c: PtrMut<T>, m: usize, n: usize, k: usize) {
    let at = block::<BM, BN>(m, n);
    let mut acc = Acc::<BM, BN>::zeros();
    k_loop::<T, BM, BN, BK, THREADS, 1>((a, sa), [(b, sb)], [m, n, k], at, |ta, [tb], ks| {
        acc = mma(&FragA::load(ta, ks), &FragB::load(tb, ks), acc);
    });
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &acc, 0, |_, _, x: [f32; 8]| x);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
