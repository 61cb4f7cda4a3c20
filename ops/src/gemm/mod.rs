//! GEMM on tensor cores: `C = A·Bᵀ` with A `[M, K]`, B `[N, K]` and C
//! `[M, N]`, all row-major (B is laid out as a linear layer's weight), bf16
//! or f16 in and out, f32 accumulation. Any M, N, K: edge tiles are masked,
//! and K need not be a multiple of BK (the masked columns load as zeros).
//!
//! Each program computes one `BM×BN` block of C.
//!
//! The K loop is [`mainloop`]: a GEMM variant is a `#[kernel]` that calls it
//! and stores the accumulator through its own epilogue (`store_acc_with`
//! takes any closure of `(row, col, value)`; `store_acc_staged` one of a row
//! chunk, through shared memory). [`gemm_nt_kernel`] and the Hopper kernels
//! are the ones with the standard fused epilogues ([`Epi`], [`store_epilogue`]):
//! `α·acc + bias`, an activation, a residual and `β·C`; `softcap` shows a
//! custom one.
use rustile::mma::acc_len;
use rustile::prelude::*;
use rustile::Fetched;

// ---- the K loop --------------------------------------------------------------------------

/// Block rows per band of the launch order (see `rustile::grouped`): 16 rows
/// of 128 keep a wave of 264 programs on about 16 + 17 operand panels.
const GROUP: usize = 16;

/// The `[row, col]` of the `BM×BN` block of C this program computes, for a
/// 1-D grid of `cdiv(m, BM)·cdiv(n, BN)` programs.
#[inline(always)]
pub fn block<const BM: usize, const BN: usize>(m: usize, n: usize) -> [usize; 2] {
    let [bm, bn] = grouped(program_id(0), cdiv(m, BM), cdiv(n, BN), GROUP);
    [bm * BM, bn * BN]
}

/// The K loop's skeleton, for any operands: a ring of `STAGES` shared-memory
/// stages, each `slices` k-slices (16) deep.
///
/// - `fill(kt, stage)` issues the `cp.async` copies of k-step `kt` into a
///   stage, `STAGES − 1` steps ahead of the step that reads it;
/// - `load(stage, ks)` reads one k-slice's register fragments;
/// - `mma(fragments)` multiplies them into the accumulators.
///
/// Each slice's fragments are loaded while the previous slice multiplies,
/// and the barrier that makes the next stage visible sits before a step's
/// last slice, so that its first fragments load while that slice
/// multiplies: no step waits on `ldmatrix` after its barrier (the CUTLASS
/// multistage schedule). There is one barrier a step.
///
/// Mark the closures `#[inline(always)]`: a step full of MMAs is over
/// LLVM's inlining budget, and a step that is not inlined takes its
/// accumulators by reference, in local memory.
#[inline(always)]
pub fn pipeline<const STAGES: usize, F>(steps: usize, slices: usize, fill: impl Fn(usize, usize), load: impl Fn(usize, usize) -> F, mut mma: impl FnMut(F))
where
    [(); { STAGES as u32 - 2 } as usize]:,
{
    let next = |s: usize| if s + 1 == STAGES { 0 } else { s + 1 };
    // Every step commits one group (empty past the last step), so that
    // `wait_copies` always counts the same number of groups in flight.
    let fill = #[inline(always)]
    |kt: usize, s: usize| {
        if kt < steps {
            fill(kt, s);
        }
        commit_copies();
    };
    for kt in 0..STAGES - 1 {
        fill(kt, kt);
    }
    wait_copies::<{ STAGES as u32 - 2 }>();
    sync();
    let (mut read, mut write) = (0, STAGES - 1);
    let mut frag = load(read, 0);
    for kt in 0..steps {
        for ks in 0..slices {
            let ahead = if ks + 1 < slices {
                load(read, ks + 1)
            } else {
                // Every thread has read this stage's last fragments: after
                // the barrier the previous stage is free (the fill below),
                // and the next is complete, so its first fragments load
                // while this slice multiplies.
                wait_copies::<{ STAGES as u32 - 2 }>();
                sync();
                read = next(read);
                load(read, 0)
            };
            mma(frag);
            frag = ahead;
            if ks == 0 {
                // The stage step kt−1 read, which every thread finished
                // before that step's barrier; issued after this slice's MMAs
                // so that the copies overlap the tensor-core work.
                fill(kt + STAGES - 1, write);
                write = next(write);
            }
        }
    }
}

/// One GEMM operand as the kernels see it: the matrix's base and its row
/// stride (elements). Whether it is stored with `k` as the row index (A
/// `[k, m]`, B `[k, n]`) or as the column is [`mainloop`]'s `TA` / `TB`.
#[derive(Clone, Copy)]
pub struct Operand<T> {
    pub ptr: Ptr<T>,
    pub ld: usize,
}

/// `op(A)·op(B)` for the `BM×BN` block of C at `at`: A is `[m, k]` (or
/// stored `[k, m]` when `TA`), B is `[n, k]` when `TB` (a linear layer's
/// weight) or stored `[k, n]`, each row `ld` elements apart. A [`pipeline`]
/// of `cp.async` copies and `mma`s; an operand stored `[k, ·]` is staged
/// as `BK` rows and read with `ldmatrix.trans`. Needs
/// `STAGES·(BM + BN)·BK·2` bytes of `SMEM`.
#[inline(always)]
pub fn mainloop<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const TA: bool, const TB: bool>(
    a: Operand<T>,
    b: Operand<T>,
    m: usize,
    n: usize,
    k: usize,
    at: [usize; 2],
) -> rustile::Acc<BM, BN, TH>
where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 2 } as usize]:,
{
    // Stage s holds A then B of one k-step, each BM·BK (BN·BK) elements in
    // either orientation.
    let base = #[inline(always)]
    |s: usize| s * (BM + BN) * BK * 2;
    let a_at = #[inline(always)]
    |s: usize| base(s);
    let b_at = #[inline(always)]
    |s: usize| base(s) + BM * BK * 2;
    let mut acc = rustile::Acc::<BM, BN, TH>::zeros();
    pipeline::<STAGES, _>(
        cdiv(k, BK),
        BK / 16,
        #[inline(always)]
        |kt, s| {
            if TA {
                Shared::<T, BK, BM, TH>::at(a_at(s)).copy_from(&BlockPtr::new(a.ptr, [k, m], [a.ld, 1], [kt * BK, at[0]]));
            } else {
                Shared::<T, BM, BK, TH>::at(a_at(s)).copy_from(&BlockPtr::new(a.ptr, [m, k], [a.ld, 1], [at[0], kt * BK]));
            }
            if TB {
                Shared::<T, BN, BK, TH>::at(b_at(s)).copy_from(&BlockPtr::new(b.ptr, [n, k], [b.ld, 1], [at[1], kt * BK]));
            } else {
                Shared::<T, BK, BN, TH>::at(b_at(s)).copy_from(&BlockPtr::new(b.ptr, [k, n], [b.ld, 1], [kt * BK, at[1]]));
            }
        },
        #[inline(always)]
        |s, ks| {
            let fa = if TA {
                FragA::load_t(&Shared::<T, BK, BM, TH>::at(a_at(s)), ks)
            } else {
                FragA::load(&Shared::<T, BM, BK, TH>::at(a_at(s)), ks)
            };
            let fb = if TB {
                FragB::load(&Shared::<T, BN, BK, TH>::at(b_at(s)), ks)
            } else {
                FragB::load_t(&Shared::<T, BK, BN, TH>::at(b_at(s)), ks)
            };
            (fa, fb)
        },
        #[inline(always)]
        |(fa, fb)| acc = mma(&fa, &fb, acc),
    );
    acc
}

/// [`mainloop`] for row-major A `[m, k]` and B `[n, k]`: `C = A·Bᵀ`.
#[inline(always)]
pub fn mainloop_nt<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize>(
    a: Ptr<T>,
    b: Ptr<T>,
    m: usize,
    n: usize,
    k: usize,
    at: [usize; 2],
) -> rustile::Acc<BM, BN, TH>
where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 2 } as usize]:,
{
    mainloop::<T, BM, BN, BK, STAGES, TH, false, true>(Operand { ptr: a, ld: k }, Operand { ptr: b, ld: k }, m, n, k, at)
}

/// [`mainloop`] against two B operands that share A (`A·B₁ᵀ` and `A·B₂ᵀ`,
/// both `[n, k]`): each A tile is loaded once for both, and both
/// accumulators stay on chip (the dual GEMM's gate and up projections).
/// Needs `STAGES·(BM + 2·BN)·BK·2` bytes of `SMEM`.
#[inline(always)]
pub fn mainloop2<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize>(
    a: Ptr<T>,
    [b1, b2]: [Ptr<T>; 2],
    m: usize,
    n: usize,
    k: usize,
    at: [usize; 2],
) -> (rustile::Acc<BM, BN, TH>, rustile::Acc<BM, BN, TH>)
where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 2 } as usize]:,
{
    // Stage s holds A, B₁, B₂ of one k-step. (Two named accumulators, not
    // an array indexed in a loop: that loop did not unroll, and the
    // accumulators went to local memory.)
    let stage = #[inline(always)]
    |s: usize| {
        let at = s * (BM + 2 * BN) * BK * 2;
        let b = |i: usize| Shared::<T, BN, BK, TH>::at(at + (BM + i * BN) * BK * 2);
        (Shared::<T, BM, BK, TH>::at(at), b(0), b(1))
    };
    let (mut acc1, mut acc2) = (rustile::Acc::<BM, BN, TH>::zeros(), rustile::Acc::<BM, BN, TH>::zeros());
    pipeline::<STAGES, _>(
        cdiv(k, BK),
        BK / 16,
        #[inline(always)]
        |kt, s| {
            let (sa, sb1, sb2) = stage(s);
            sa.copy_from(&BlockPtr::rows(a, m, k, [at[0], kt * BK]));
            sb1.copy_from(&BlockPtr::rows(b1, n, k, [at[1], kt * BK]));
            sb2.copy_from(&BlockPtr::rows(b2, n, k, [at[1], kt * BK]));
        },
        #[inline(always)]
        |s, ks| {
            let (sa, sb1, sb2) = stage(s);
            (FragA::load(&sa, ks), FragB::load(&sb1, ks), FragB::load(&sb2, ks))
        },
        #[inline(always)]
        |(fa, fb1, fb2)| {
            acc1 = mma(&fa, &fb1, acc1);
            acc2 = mma(&fa, &fb2, acc2);
        },
    );
    (acc1, acc2)
}

// ---- standard fused epilogues ------------------------------------------------------------

/// The activation of a fused epilogue (its discriminant is its code in `Epi::flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Act {
    None = 0,
    Relu = 1,
    /// `relu(x)²` (Primer).
    Relu2 = 2,
    Silu = 3,
    /// GELU with the tanh approximation.
    GeluTanh = 4,
    /// The SiLU's backward: `y·silu'(r)`, where `r` is the residual operand
    /// (the saved pre-activation), which is then a factor, not added. Fused
    /// into the GEMM that produces the activation's gradient, so that
    /// gradient is never written before it is scaled. Staged epilogues
    /// only: the Hopper kernels, and the `mma.sync` ones writing f32.
    SiluGrad = 5,
}

/// Where a fused bias broadcasts (its discriminant is its code in `Epi::flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Bias {
    None = 0,
    /// One value per column of C (`[n]`): a linear layer's bias.
    PerColumn = 1,
    /// One value per row of C (`[m]`).
    PerRow = 2,
}

/// What `gemm_nt_kernel` does to each accumulator value before the store:
/// `act(α·acc + bias) + residual + β·C`. It travels to the GPU as `alpha`,
/// `beta` and one `u32` of flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epi {
    pub alpha: f32,
    pub beta: f32,
    pub bias: Bias,
    pub act: Act,
    pub residual: bool,
}

impl Epi {
    /// Plain `C = A·Bᵀ`.
    pub const NONE: Epi = Epi { alpha: 1.0, beta: 0.0, bias: Bias::None, act: Act::None, residual: false };

    /// Bits 0-1 the bias, 2-4 the activation, 5 the residual.
    pub const fn flags(&self) -> u32 {
        self.bias as u32 | (self.act as u32) << 2 | (self.residual as u32) << 5
    }

    #[inline(always)]
    pub fn from_flags(flags: u32, alpha: f32, beta: f32) -> Epi {
        let bias = match flags & 3 {
            1 => Bias::PerColumn,
            2 => Bias::PerRow,
            _ => Bias::None,
        };
        let act = match (flags >> 2) & 7 {
            1 => Act::Relu,
            2 => Act::Relu2,
            3 => Act::Silu,
            4 => Act::GeluTanh,
            5 => Act::SiluGrad,
            _ => Act::None,
        };
        Epi { alpha, beta, bias, act, residual: flags & 32 != 0 }
    }

    /// `act(α·x + bias) + residual + β·old` for a chunk of 8 values (the fused
    /// operands' values at their positions, zero where unused): the activation is chosen once
    /// for all 8, so they run as straight-line code (a `match` per value is
    /// an indirect branch per value on the GPU, which serializes them), and
    /// its division is `rcp.approx` ([`Act::apply_fast`]).
    #[inline(always)]
    pub fn apply_chunk(&self, x: [f32; 8], bias: [f32; 8], residual: [f32; 8], old: [f32; 8]) -> [f32; 8] {
        let mut y = [0.0; 8];
        for i in 0..8 {
            y[i] = self.alpha * x[i] + bias[i];
        }
        // Each arm names its activation as a constant, so that the `match`
        // inside `apply_fast` folds away and the 8 values are straight-line code.
        let mut y = match self.act {
            Act::None => y,
            Act::Relu => y.map(|v| Act::Relu.apply_fast(v)),
            Act::Relu2 => y.map(|v| Act::Relu2.apply_fast(v)),
            Act::Silu => y.map(|v| Act::Silu.apply_fast(v)),
            Act::GeluTanh => y.map(|v| Act::GeluTanh.apply_fast(v)),
            Act::SiluGrad => {
                for i in 0..8 {
                    y[i] *= math::silu_grad_fast(residual[i]);
                }
                for i in 0..8 {
                    y[i] += self.beta * old[i];
                }
                return y;
            }
        };
        for i in 0..8 {
            y[i] += residual[i] + self.beta * old[i];
        }
        y
    }
}

impl Act {
    #[inline(always)]
    pub fn apply(self, y: f32) -> f32 {
        match self {
            Act::None => y,
            Act::Relu => math::max(y, 0.0),
            Act::Relu2 => {
                let r = math::max(y, 0.0);
                r * r
            }
            Act::Silu => math::silu(y),
            Act::GeluTanh => math::gelu_tanh(y),
            // Its factor comes from the residual operand (`Epi::apply_chunk`).
            Act::SiluGrad => y,
        }
    }

    /// [`Act::apply`] with `rcp.approx` for the division of SiLU and GELU
    /// (a few ulp of f32): the staged epilogue's.
    #[inline(always)]
    pub fn apply_fast(self, y: f32) -> f32 {
        match self {
            Act::Silu => math::silu_fast(y),
            Act::GeluTanh => math::gelu_tanh_fast(y),
            _ => self.apply(y),
        }
    }
}

// ---- the kernel --------------------------------------------------------------------------

/// The GEMM config space, wrapped around a `#[kernel]` that calls
/// [`mainloop`] with `BM`, `BN`, `BK` and `STAGES` (`SMEM` must equal
/// `STAGES·(BM + BN)·BK·2`; the interpreter checks it). `dtypes` defaults
/// to `[bf16, f16]`. Host code names configs by [`MMA_64`] and [`MMA_128`].
///
/// Three configs: each costs ptxas about 50 s per 16-bit layout and arch
/// (the per-element epilogue), and 128×128 with `BK = 32` over four stages,
/// once listed, was never the fastest in any bucket of the H100's table
/// (3-11 % behind `BK = 64`; bench/RESULTS.md, 2026-11-28, "CI time…").
#[macro_export]
macro_rules! gemm_kernel {
    (grid = $grid:tt, dtypes = $dtypes:tt, $($item:tt)*) => {
        #[::rustile::kernel(
            configs = [
                (BM = 64, BN = 64, BK = 32, WARPS = 4, STAGES = 3, SMEM = 24576),
                (BM = 128, BN = 128, BK = 64, WARPS = 4, STAGES = 3, SMEM = 98304),
                (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 3, SMEM = 147456),
            ],
            grid = $grid,
            dtypes = $dtypes,
        )]
        $($item)*
    };
    (grid = $grid:tt, $($item:tt)*) => {
        $crate::gemm_kernel!(grid = $grid, dtypes = [bf16, f16], $($item)*);
    };
}

/// Batch `program_id(1)`'s block of `C = act(α·op(A)·op(B) + bias) +
/// residual + β·C`: the program of every `gemm_*_kernel`. Matrix `z` of a
/// batch starts `z·stride` elements in (`[sa, sb, sc, sbias]`; 0: shared by
/// the whole batch); the residual has C's layout.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_program<T: Elem, C: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const TA: bool, const TB: bool>(
    a: Operand<T>,
    b: Operand<T>,
    c: PtrMut<C>,
    ldc: usize,
    bias: Ptr<T>,
    residual: Ptr<T>,
    [m, n, k]: [usize; 3],
    [sa, sb, sc, sbias]: [usize; 4],
    epi: Epi,
    out: Out,
) where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 2 } as usize]:,
{
    let z = program_id(1);
    let (a, b) = (Operand { ptr: a.ptr.offset(z * sa), ..a }, Operand { ptr: b.ptr.offset(z * sb), ..b });
    let at = block::<BM, BN>(m, n);
    let acc = mainloop::<T, BM, BN, BK, STAGES, TH, TA, TB>(a, b, m, n, k, at);
    // Every output through the finished stages (`SMEM ≥ 4·BM·BN` in every
    // config). A per-element epilogue from the registers, unrolled over the
    // accumulator, cost ptxas 47 s a kernel against 4; kept for plain products
    // alone, its registers beside the staged loop's spilled 16 bytes in the
    // main loop of a 128×128 `Aᵀ·Bᵀ` (bench/RESULTS.md, 2026-11-28, "CI time…").
    store_epilogue(&acc, c, ldc, bias, residual, [m, n], [z, sc, sbias], at, epi, Dequant::NONE, out, 0);
}

/// Batch `z`'s windows of a fused epilogue at block `at`.
struct Windows<T, C, const BM: usize, const BN: usize, const TH: usize> {
    out: BlockPtr<C, BM, BN, TH>,
    /// C's layout, in the operands' type.
    residual: BlockPtr<T, BM, BN, TH>,
    per_col: BlockPtr<T, 1, BN, TH>,
    per_row: BlockPtr<T, BM, 1, TH>,
}

/// The [`Windows`] of batch `z` at `at`. The `[z, sc, sbias]` offsets apply
/// only to operands the epilogue uses: an unused one is a placeholder that
/// may be shorter than C, and is never read.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn epilogue_windows<T: Elem, C: Elem, const BM: usize, const BN: usize, const TH: usize>(
    c: PtrMut<C>,
    ldc: usize,
    bias: Ptr<T>,
    residual: Ptr<T>,
    [m, n]: [usize; 2],
    [z, sc, sbias]: [usize; 3],
    at: [usize; 2],
    epi: Epi,
) -> Windows<T, C, BM, BN, TH> {
    let residual = if epi.residual { residual.offset(z * sc) } else { residual };
    let bias = if epi.bias != Bias::None { bias.offset(z * sbias) } else { bias };
    Windows {
        out: BlockPtr::new(c.offset(z * sc), [m, n], [ldc, 1], at),
        residual: BlockPtr::new(residual, [m, n], [ldc, 1], at),
        per_col: BlockPtr::rows(bias, 1, n, [0, at[1]]),
        per_row: BlockPtr::rows(bias, m, 1, [at[0], 0]),
    }
}

/// Factors that dequantize an FP8 product before its epilogue: `acc[r, c]`
/// is multiplied by `rows[r]` (A's scale per row) and `cols[c]` (B's per
/// row, so per column of C). Per-tensor scales travel in `Epi::alpha`.
#[derive(Clone, Copy)]
pub struct Dequant {
    pub rows: Option<Ptr<f32>>,
    pub cols: Option<Ptr<f32>>,
}

impl Dequant {
    /// No factors: the 16-bit GEMMs.
    pub const NONE: Dequant = Dequant { rows: None, cols: None };
}

/// What the output gets after the [`Epi`]: multiplied by the device scalar
/// `scale` (an FP8 output's quantization scale), and the largest magnitude
/// before that raised into `amax[0]` (from which the next scale comes).
/// The kernels take both as arguments and two bits of `flags` ([`Out::flags`]).
#[derive(Clone, Copy)]
pub struct Out {
    pub scale: Option<Ptr<f32>>,
    pub amax: Option<PtrMut<f32>>,
}

impl Out {
    /// Values stored as they come.
    pub const NONE: Out = Out { scale: None, amax: None };
    const SCALE: u32 = 1 << 6;
    const AMAX: u32 = 1 << 7;

    /// Bit 6: multiply by `scale`; bit 7: record the amax. They share a
    /// `u32` with [`Epi::flags`] (bits 0-5).
    pub const fn flags(scale: bool, amax: bool) -> u32 {
        (scale as u32) * Out::SCALE | (amax as u32) * Out::AMAX
    }

    #[inline(always)]
    pub fn from_flags(flags: u32, scale: Ptr<f32>, amax: PtrMut<f32>) -> Out {
        Out {
            scale: if flags & Out::SCALE != 0 { Some(scale) } else { None },
            amax: if flags & Out::AMAX != 0 { Some(amax) } else { None },
        }
    }
}

/// Stores batch `z`'s block of `C = out(act(α·acc·dq + bias) + residual +
/// β·C)` at `at`, through `4·BM·BN` bytes of shared memory at `scratch` (the
/// finished main loop's stages; [`store_acc_staged_with`]): each thread
/// finishes whole 8-column chunks, with the residual, bias, old C and
/// column scales of four chunks in flight at once, and every warp's stores
/// cover whole rows. C may be wider or narrower than the operands (f32,
/// FP8: [`Out`] scales it and records its amax). The fused epilogue of the
/// Hopper kernels (either accumulator layout works).
///
/// Per chunk, each operand and the activation cost one uniform branch, and
/// an operand the epilogue does not use is neither loaded nor waited for:
/// a lone `α` costs a multiply a value.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn store_epilogue<T: Elem, C: Elem, const BM: usize, const BN: usize, const TH: usize, const WG: bool>(
    acc: &rustile::Acc<BM, BN, TH, WG>,
    c: PtrMut<C>,
    ldc: usize,
    bias: Ptr<T>,
    residual: Ptr<T>,
    mn: [usize; 2],
    batch: [usize; 3],
    at: [usize; 2],
    epi: Epi,
    dq: Dequant,
    out: Out,
    scratch: usize,
) where
    [(); acc_len(BM, BN, TH)]:,
{
    let Windows { out: dst, residual: res, per_col, per_row } = epilogue_windows::<T, C, BM, BN, TH>(c, ldc, bias, residual, mn, batch, at, epi);
    let [m, n] = mn;
    let scale = out.scale.map(|p| BlockPtr::<f32, 1, 1, TH>::rows(p, 1, 1, [0, 0]).get(0, 0, 1.0));
    // Nothing to read and no activation (a plain product, or one scaled by
    // α or an output scale): a loop of a tenth of the code. It matters because the epilogue runs
    // once a tile, from a cold instruction cache (ncu: a fifth of the FP8
    // kernel's stall samples at 4096³, many waiting for instructions).
    let plain = Epi { alpha: 1.0, ..epi } == Epi::NONE && dq.rows.is_none() && dq.cols.is_none() && out.amax.is_none();
    if plain {
        let alpha = epi.alpha * scale.unwrap_or(1.0);
        store_acc_staged(&dst, acc, scratch, |_, _, x: [f32; 8]| x.map(|v| alpha * v));
        return;
    }
    // An activation and nothing to read (an MLP's first GEMM): the same short
    // loop. Through the general one below, a SiLU made the GEMM of 16384×1368×512
    // take 178 µs against 85 plain (bench/RESULTS.md, 2026-11-26, "The MLP as one
    // kernel, weighed"). Hopper's kernels only (`WG`): the loop's code in the 60
    // `mma.sync` kernels would cost ptxas minutes in every build.
    let act_only = Epi { alpha: 1.0, act: Act::None, ..epi } == Epi::NONE && epi.act != Act::SiluGrad;
    if WG && act_only && dq.rows.is_none() && dq.cols.is_none() && out.amax.is_none() {
        let s = scale.unwrap_or(1.0);
        store_acc_staged(&dst, acc, scratch, |_, _, x: [f32; 8]| epi.apply_chunk(x, [0.0; 8], [0.0; 8], [0.0; 8]).map(|v| v * s));
        return;
    }
    let row_scale = dq.rows.map(|p| BlockPtr::<f32, BM, 1, TH>::rows(p, m, 1, [at[0], 0]));
    let col_scale = dq.cols.map(|p| BlockPtr::<f32, 1, BN, TH>::rows(p, 1, n, [0, at[1]]));
    let (bias_kind, beta) = (epi.bias, epi.beta != 0.0);
    // Per-row values (bias, A's scale) are one scalar load for the chunk;
    // per-column and per-element ones a chunk.
    let fetch = #[inline(always)]
    |r: usize, col: usize| {
        let b = if bias_kind == Bias::PerColumn { per_col.fetch_chunk(0, col) } else { Fetched::zeros() };
        let rb = if bias_kind == Bias::PerRow { per_row.get(r, 0, 0.0) } else { 0.0 };
        let old = if beta { dst.fetch_chunk(r, col) } else { Fetched::zeros() };
        let rs = row_scale.map(|p| p.get(r, 0, 0.0));
        let cs = match col_scale {
            Some(p) => p.fetch_chunk(0, col),
            None => Fetched::zeros(),
        };
        let res = if epi.residual { res.fetch_chunk(r, col) } else { Fetched::zeros() };
        (b, rb, res, old, rs, cs)
    };
    // The largest |value| this thread stored (`Fn` closures share it through a cell).
    let amax = core::cell::Cell::new(0.0f32);
    let finish = #[inline(always)]
    |r: usize, col: usize, x: [f32; 8], (b, rb, res, old, rs, cs): (Fetched<T>, f32, Fetched<T>, Fetched<C>, Option<f32>, Fetched<f32>)| {
        let x = match rs {
            Some(rs) => x.map(|v| v * rs),
            None => x,
        };
        let x = if col_scale.is_some() {
            let cs = cs.get();
            core::array::from_fn(|i| x[i] * cs[i])
        } else {
            x
        };
        let b = match bias_kind {
            Bias::None => [0.0; 8],
            Bias::PerColumn => b.get(),
            Bias::PerRow => [rb; 8],
        };
        let res = if epi.residual { res.get() } else { [0.0; 8] };
        let old = if beta { old.get() } else { [0.0; 8] };
        let y = epi.apply_chunk(x, b, res, old);
        // Only values inside C count: past its last row a column bias alone is not zero.
        if out.amax.is_some() && at[0] + r < m {
            let (valid, mut top) = (n.saturating_sub(at[1] + col), amax.get());
            for i in 0..8 {
                if i < valid {
                    top = math::max(top, math::abs(y[i]));
                }
            }
            amax.set(top);
        }
        match scale {
            Some(s) => y.map(|v| v * s),
            None => y,
        }
    };
    store_acc_staged_with(&dst, acc, scratch, fetch, finish);
    if let Some(p) = out.amax {
        p.max_into(amax.get());
    }
}

/// One `#[kernel]` per operand layout, all with the same arguments: `a`
/// row stride `lda`, batch strides `sa`/`sb`/`sc`/`sbias`, the epilogue
/// as `alpha`, `beta` and `Epi::flags`, and C of the operands' type, f32,
/// or (from bf16) e4m3, scaled by `scale_c[0]` and its amax raised into
/// `amax[0]` as `flags` say ([`Out`]).
macro_rules! gemm_layouts {
    ($($(#[$doc:meta])* $name:ident: TA = $ta:literal, TB = $tb:literal;)*) => {$(
        gemm_kernel! {
        grid = [cdiv(m, BM) * cdiv(n, BN), batch],
        dtypes = [bf16, f16, (bf16, f32), (f16, f32), (bf16, F8E4M3)],
        $(#[$doc])*
        pub fn $name<T: Elem, C: Elem>(
            a: Ptr<T>, b: Ptr<T>, c: PtrMut<C>, bias: Ptr<T>, residual: Ptr<T>, scale_c: Ptr<f32>, amax: PtrMut<f32>,
            m: usize, n: usize, k: usize, batch: usize, lda: usize, ldb: usize, ldc: usize,
            sa: usize, sb: usize, sc: usize, sbias: usize, alpha: f32, beta: f32, flags: u32,
        ) {
            let _ = batch; // the grid's second dimension
            gemm_program::<T, C, BM, BN, BK, STAGES, THREADS, $ta, $tb>(
                Operand { ptr: a, ld: lda }, Operand { ptr: b, ld: ldb }, c, ldc, bias, residual,
                [m, n, k], [sa, sb, sc, sbias], Epi::from_flags(flags, alpha, beta), Out::from_flags(flags, scale_c, amax),
            );
        }
        }
    )*};
}

gemm_layouts! {
    /// A `[m, k]`, B `[n, k]` (a linear layer's weight): `C = A·Bᵀ`.
    gemm_nt_kernel: TA = false, TB = true;
    /// A `[m, k]`, B `[k, n]`: `C = A·B`.
    gemm_nn_kernel: TA = false, TB = false;
    /// A stored `[k, m]`, B `[k, n]`: `C = Aᵀ·B` (a weight gradient).
    gemm_tn_kernel: TA = true, TB = false;
    /// A stored `[k, m]`, B `[n, k]`: `C = Aᵀ·Bᵀ`.
    gemm_tt_kernel: TA = true, TB = true;
}

mod softcap;
pub use softcap::*;
mod wgmma;
pub use wgmma::*;

// ---- config choice and host API ----------------------------------------------------------

/// The config `gemm_nt` runs where the tuned table (`crate::tune`) has no
/// entry: 128×128 blocks when there are enough of them to fill the GPU's SMs
/// twice, else 64×64.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { MMA_128 } else { MMA_64 }
}

/// The 64×64 config of every [`gemm_kernel!`] kernel (`gemm_nt_kernel` and
/// the other layouts, softcap, grouped): an index into their `CONFIGS`.
pub const MMA_64: usize = 0;
/// Their 128×128 config (`BK = 64`).
pub const MMA_128: usize = 1;

/// The config of `gemm_wgmma_kernel` where the tuned table has none:
/// 128×256 blocks when they fill the H100's 132 SMs, else 128×128 when
/// those do, else 64×128.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_wgmma_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 256) >= 132 {
        0
    } else if cdiv(m, 128) * cdiv(n, 128) >= 132 {
        1
    } else {
        3
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
