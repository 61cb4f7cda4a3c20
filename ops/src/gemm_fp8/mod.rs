//! FP8 GEMM on Hopper: `C = act(α·(A·Bᵀ)·dq + bias) + residual + β·C` with
//! A `[M, K]` and B `[N, K]` each in e4m3 or e5m2 (the same, or mixed: a
//! backward pass multiplies e5m2 gradients by e4m3 weights), C, bias and
//! residual bf16, f32 accumulation, any M and N, K a multiple of 16.
//!
//! The main loop is the bf16 GEMM's ([`mainloop_tma`](crate::gemm::mainloop_tma)): the tensor cores
//! multiply 8-bit operands twice as deep per instruction, so a stage holds
//! 128 of K in the same 128-byte rows and the same shared memory, and a
//! k-step does twice the work for the same copies. FP8 `wgmma` reads
//! K-major operands only, which `A·Bᵀ` with both row-major is.
//!
//! Scales are how FP8 stays accurate: the host quantizes each operand as
//! `x / s` and the product is multiplied back. A per-tensor scale (a device
//! scalar) is folded into `α` once a program; a per-row scale of A
//! (`[M]`) or of B (`[N]`, per column of C) multiplies the accumulator in
//! the staged epilogue ([`Dequant`](crate::gemm::Dequant)), before bias, activation and residual.
use rustile::prelude::*;

/// How one operand's scale is given (2 bits of the kernel's `scales`
/// argument, A's in bits 0-1, B's in bits 2-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ScaleKind {
    /// No scale (1).
    None = 0,
    /// One device scalar for the whole operand.
    Tensor = 1,
    /// One value per row of the operand.
    Row = 2,
}

impl ScaleKind {
    #[inline(always)]
    pub fn of(scales: u32, operand: u32) -> ScaleKind {
        match (scales >> (2 * operand)) & 3 {
            1 => ScaleKind::Tensor,
            2 => ScaleKind::Row,
            _ => ScaleKind::None,
        }
    }
}

// `SMEM = pad(TH) + STAGES·((BM + BN)·BK + 16)`: the bf16 TMA kernel's
// configs at the same bytes a stage, the copy warpgroup's included.
#[kernel(
    configs = [
        (BM = 128, BN = 256, BK = 128, WARPS = 8, STAGES = 4, COPIER = 0, SMEM = 196672),
        (BM = 128, BN = 128, BK = 128, WARPS = 8, STAGES = 6, COPIER = 0, SMEM = 196704),
        (BM = 64, BN = 256, BK = 128, WARPS = 4, STAGES = 5, COPIER = 0, SMEM = 205392),
        (BM = 64, BN = 128, BK = 128, WARPS = 4, STAGES = 6, COPIER = 0, SMEM = 148064),
        (BM = 128, BN = 256, BK = 128, WARPS = 12, STAGES = 4, COPIER = 1, SMEM = 196672),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [(F8E4M3, bf16), (F8E5M2, bf16), F8E4M3, (F8E5M2, F8E4M3, bf16), (F8E4M3, F8E5M2, bf16)],
    arch = sm_90a,
)]
/// `c[m, n] = out(act(α·sa·sb·(a·bᵀ) + bias) + residual + β·c)` for FP8 `a`
/// `[m, k]` and `b` `[n, k]` (either format each), `c` bf16 or (from e4m3) e4m3 (rows `ldc`
/// apart), bf16 bias and residual; `flags` as [`Epi::flags`](crate::gemm::Epi::flags) and
/// [`Out::flags`](crate::gemm::Out::flags) (`scale_c`, `amax`), `scales` as [`ScaleKind`];
/// `map_a`, `map_b` the operands' tensor maps (boxes of `BM×128`, `BN×128`).
pub fn gemm_fp8_kernel<TA: Elem, TB: Elem, C: Elem>(
    a: Ptr<TA>, b: Ptr<TB>, c: PtrMut<C>, bias: Ptr<bf16>, residual: Ptr<bf16>, scale_a: Ptr<f32>, scale_b: Ptr<f32>,
    scale_c: Ptr<f32>, amax: PtrMut<f32>,
    m: usize, n: usize, k: usize, ldc: usize, alpha: f32, beta: f32, flags: u32, scales: u32, map_a: u64, map_b: u64,
) {
    use crate::gemm::{block, mainloop_tma_cfg, pad, store_epilogue, Dequant, Epi, Mapped, Operand, Out};
    // The scale of a `Tensor` operand, else 1 (loaded once a program).
    let tensor_scale = |kind: ScaleKind, p: Ptr<f32>| {
        if kind == ScaleKind::Tensor { rustile::BlockPtr::<f32, 1, 1, TH>::rows(p, 1, 1, [0, 0]).get(0, 0, 1.0) } else { 1.0 }
    };
    let at = block::<BM, BN>(m, n);
    let a = Mapped { map: map_a, z: 0, op: Operand { ptr: a, ld: k } };
    let b = Mapped { map: map_b, z: 0, op: Operand { ptr: b, ld: k } };
    // The threads that multiply (and store): all, or all but the copy warpgroup.
    const TH: usize = THREADS - 128 * COPIER;
    let [acc] = mainloop_tma_cfg::<TA, TB, BM, BN, BK, STAGES, TH, 1, COPIER>(a, [b], [m, n, k], at);
    let (ka, kb) = (ScaleKind::of(scales, 0), ScaleKind::of(scales, 1));
    let alpha = alpha * tensor_scale(ka, scale_a) * tensor_scale(kb, scale_b);
    let dq = Dequant {
        rows: if ka == ScaleKind::Row { Some(scale_a) } else { None },
        cols: if kb == ScaleKind::Row { Some(scale_b) } else { None },
    };
    let epi = Epi::from_flags(flags, alpha, beta);
    let out = Out::from_flags(flags, scale_c, amax);
    store_epilogue(&acc, c, ldc, bias, residual, [m, n], [0, 0, 0], at, epi, dq, out, pad(TH));
}

/// The config where the tuned table has none: 128×256 blocks when they
/// fill the H100's 132 SMs, else 128×128 when those do, else 64×128 (the
/// bf16 TMA kernel's rule).
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    crate::gemm::default_wgmma_config(m, n)
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
