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
//!   of eight values and scales `[rows, K/16]` in the plain layout; the host
//!   converts cuBLAS's blocked scale layout ([`crate::nvfp4`]) once, as it
//!   would for weights.
use crate::gemm::block;
use rustile::prelude::*;

/// The tile `[R, C]` of an NVFP4 operand at row `row0`, column `col0`
/// (a multiple of `C`, itself a multiple of 16), decoded to `T`: `words`
/// holds each row's values eight to a 32-bit word (`k / 8` a row), `scales`
/// one E4M3 a 16 values (`k / 16` a row). Rows past `rows` and columns
/// past `k` are zeros.
#[inline(always)]
fn decoded<T: Elem, const R: usize, const C: usize, const TH: usize>(
    words: Ptr<u32>, scales: Ptr<F8E4M3>, rows: usize, k: usize, [row0, col0]: [usize; 2],
) -> Tile<T, R, C, TH>
where
    [(); rustile::len(R, C, TH)]:,
{
    // A thread holds whole 8-column chunks: the eight values of a chunk share
    // one word and one scale, so their repeated reads fold into one load each.
    Tile::from_fn(|r, c| {
        let (row, col) = (row0 + r, col0 + c);
        if row < rows && col < k {
            let word = words.read(row * (k / 8) + col / 8);
            let scale = scales.read(row * (k / 16) + col / 16).to_f32();
            T::from_f32(rustile::e2m1_to_f32((word >> (4 * (col % 8) as u32)) as u8) * scale)
        } else {
            T::default()
        }
    })
}

// `SMEM ≥ (BM + 2·BN)·BK·2` (one stage of the decoded A, B₁, B₂) and
// `≥ 4·BM·BN` (the staged store of C).
#[kernel(
    configs = [
        (BM = 64, BN = 64, BK = 64, WARPS = 4, SMEM = 24576),
        (BM = 128, BN = 64, BK = 64, WARPS = 8, SMEM = 32768),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, SMEM = 65536),
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
    let ta = Shared::<T, BM, BK>::at(0);
    let tb1 = Shared::<T, BN, BK>::at(BM * BK * 2);
    let tb2 = Shared::<T, BN, BK>::at((BM + BN) * BK * 2);
    let (mut gate, mut up) = (Acc::<BM, BN>::zeros(), Acc::<BM, BN>::zeros());
    for kt in 0..k / BK {
        ta.store(&decoded::<T, BM, BK, THREADS>(a, sa, m, k, [at[0], kt * BK]));
        tb1.store(&decoded::<T, BN, BK, THREADS>(b1, sb1, n, k, [at[1], kt * BK]));
        tb2.store(&decoded::<T, BN, BK, THREADS>(b2, sb2, n, k, [at[1], kt * BK]));
        sync();
        for ks in 0..BK / 16 {
            let fa = FragA::load(&ta, ks);
            gate = mma(&fa, &FragB::load(&tb1, ks), gate);
            up = mma(&fa, &FragB::load(&tb2, ks), up);
        }
        // Every thread has read this step's tiles before the next overwrites them.
        sync();
    }
    let h = gate.zip(up, |g, u| math::silu(g) * u);
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &h, 0, |_, _, x: [f32; 8]| x);
}

/// The NVFP4 matrix `[rows, k]` (`words`, `scales` as the dual GEMM reads
/// them) dequantized into `out` `[rows, k]`, exactly: what a framework does
/// on a GPU without FP4 tensor cores before a 16-bit GEMM (the bench's
/// baseline), and a way to look at an NVFP4 tensor.
#[kernel(
    configs = [(BR = 16, BC = 256, WARPS = 4)],
    grid = [cdiv(rows, BR), cdiv(k, BC)],
    dtypes = [f16, bf16],
)]
pub fn nvfp4_dequantize_kernel<T: Elem>(words: Ptr<u32>, scales: Ptr<F8E4M3>, out: PtrMut<T>, rows: usize, k: usize) {
    let at = [program_id(0) * BR, program_id(1) * BC];
    let t = decoded::<T, BR, BC, THREADS>(words, scales, rows, k, at);
    store(&BlockPtr::rows(out, rows, k, at), &t);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
