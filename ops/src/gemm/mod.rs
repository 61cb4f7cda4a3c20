//! GEMM on tensor cores: `C = A·Bᵀ` with A `[M, K]`, B `[N, K]` and C
//! `[M, N]`, all row-major (B is laid out as a linear layer's weight), bf16
//! or f16 in and out, f32 accumulation. Any M, N, K: edge tiles are masked,
//! and K need not be a multiple of BK (the masked columns load as zeros).
//!
//! Each program computes one `BM×BN` block of C.
//!
//! The K loop is [`mainloop`]: a GEMM variant is a `#[kernel]` that calls it
//! and stores the accumulator through its own epilogue (`store_acc_with`
//! takes any closure of `(row, col, value)`). [`gemm_nt_kernel`] is the one with the
//! standard fused epilogues ([`Epi`]): `α·acc + bias`, an activation, a
//! residual and `β·C`; `softcap` shows a custom one.
use rustile::mma::acc_len;
use rustile::prelude::*;

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
            _ => Act::None,
        };
        Epi { alpha, beta, bias, act, residual: flags & 32 != 0 }
    }

    /// The output value from the accumulator `x` and the fused operands'
    /// values at its position (zero where unused).
    #[inline(always)]
    pub fn apply(&self, x: f32, bias: f32, residual: f32, old: f32) -> f32 {
        let y = self.alpha * x + bias;
        let y = match self.act {
            Act::None => y,
            Act::Relu => math::max(y, 0.0),
            Act::Relu2 => {
                let r = math::max(y, 0.0);
                r * r
            }
            Act::Silu => math::silu(y),
            Act::GeluTanh => math::gelu_tanh(y),
        };
        y + residual + self.beta * old
    }
}

// ---- the kernel --------------------------------------------------------------------------

/// The GEMM config space, wrapped around a `#[kernel]` that calls
/// [`mainloop`] with `BM`, `BN`, `BK` and `STAGES` (`SMEM` must equal
/// `STAGES·(BM + BN)·BK·2`; the interpreter checks it).
#[macro_export]
macro_rules! gemm_kernel {
    (grid = $grid:tt, $($item:tt)*) => {
        #[::rustile::kernel(
            configs = [
                (BM = 64, BN = 64, BK = 32, WARPS = 4, STAGES = 3, SMEM = 24576),
                (BM = 128, BN = 128, BK = 32, WARPS = 4, STAGES = 4, SMEM = 65536),
                (BM = 128, BN = 128, BK = 64, WARPS = 4, STAGES = 3, SMEM = 98304),
                (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 3, SMEM = 147456),
            ],
            grid = $grid,
            dtypes = [bf16, f16],
        )]
        $($item)*
    };
}

/// Batch `program_id(1)`'s block of `C = act(α·op(A)·op(B) + bias) +
/// residual + β·C`: the program of every `gemm_*_kernel`. Matrix `z` of a
/// batch starts `z·stride` elements in (`[sa, sb, sc, sbias]`; 0: shared by
/// the whole batch); the residual has C's layout.
#[inline(always)]
pub fn gemm_program<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize, const TA: bool, const TB: bool>(
    a: Operand<T>,
    b: Operand<T>,
    c: PtrMut<T>,
    ldc: usize,
    bias: Ptr<T>,
    residual: Ptr<T>,
    [m, n, k]: [usize; 3],
    [sa, sb, sc, sbias]: [usize; 4],
    epi: Epi,
) where
    [(); acc_len(BM, BN, TH)]:,
    [(); { STAGES as u32 - 2 } as usize]:,
{
    let z = program_id(1);
    let (a, b) = (Operand { ptr: a.ptr.offset(z * sa), ..a }, Operand { ptr: b.ptr.offset(z * sb), ..b });
    let at = block::<BM, BN>(m, n);
    let acc = mainloop::<T, BM, BN, BK, STAGES, TH, TA, TB>(a, b, m, n, k, at);
    let out = BlockPtr::<T, BM, BN, TH>::new(c.offset(z * sc), [m, n], [ldc, 1], at);
    // The per-element epilogue below is long code; a plain product (one
    // uniform test) skips it.
    if epi == Epi::NONE {
        store_acc(&out, &acc);
        return;
    }
    // (Unused operands are placeholders that may be shorter than C.)
    let residual = if epi.residual { residual.offset(z * sc) } else { residual };
    let bias = if epi.bias != Bias::None { bias.offset(z * sbias) } else { bias };
    let res = BlockPtr::<T, BM, BN, TH>::new(residual, [m, n], [ldc, 1], at);
    let per_col = BlockPtr::<T, 1, BN, TH>::rows(bias, 1, n, [0, at[1]]);
    let per_row = BlockPtr::<T, BM, 1, TH>::rows(bias, m, 1, [at[0], 0]);
    store_acc_with(&out, &acc, |r, col, x| {
        let bias = match epi.bias {
            Bias::None => 0.0,
            Bias::PerColumn => per_col.get(0, col, 0.0),
            Bias::PerRow => per_row.get(r, 0, 0.0),
        };
        let residual = if epi.residual { res.get(r, col, 0.0) } else { 0.0 };
        let old = if epi.beta != 0.0 { out.get(r, col, 0.0) } else { 0.0 };
        epi.apply(x, bias, residual, old)
    });
}

/// One `#[kernel]` per operand layout, all with the same arguments: `a`
/// row stride `lda`, batch strides `sa`/`sb`/`sc`/`sbias`, and the epilogue
/// as `alpha`, `beta` and `Epi::flags`.
macro_rules! gemm_layouts {
    ($($(#[$doc:meta])* $name:ident: TA = $ta:literal, TB = $tb:literal;)*) => {$(
        gemm_kernel! {
        grid = [cdiv(m, BM) * cdiv(n, BN), batch],
        $(#[$doc])*
        pub fn $name<T: Elem>(
            a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, bias: Ptr<T>, residual: Ptr<T>,
            m: usize, n: usize, k: usize, batch: usize, lda: usize, ldb: usize, ldc: usize,
            sa: usize, sb: usize, sc: usize, sbias: usize, alpha: f32, beta: f32, flags: u32,
        ) {
            let _ = batch; // the grid's second dimension
            gemm_program::<T, BM, BN, BK, STAGES, THREADS, $ta, $tb>(
                Operand { ptr: a, ld: lda }, Operand { ptr: b, ld: ldb }, c, ldc, bias, residual,
                [m, n, k], [sa, sb, sc, sbias], Epi::from_flags(flags, alpha, beta),
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

// ---- config choice and host API ----------------------------------------------------------

/// The config `gemm_nt` runs where the tuned table (`crate::tune`) has no
/// entry: 128×128 blocks when there are enough of them to fill the GPU's SMs
/// twice, else 64×64.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config(m: usize, n: usize) -> usize {
    if cdiv(m, 128) * cdiv(n, 128) >= 264 { 2 } else { 0 }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::{expect_shape, matrix};
    use rustile_host::{Error, Gpu, Result, Tensor};

    pub(crate) fn check_dtype<T: Elem>(op: &str) -> Result<()> {
        if !matches!(T::KIND, Kind::Bf16 | Kind::F16) {
            return Err(Error::DType(format!("{op} takes bf16 or f16 operands, not {}", T::NAME)));
        }
        Ok(())
    }

    /// `(m, n, k)` of `c = a·bᵀ` for 2-D row-major `a` `[m, k]`, `b` `[n, k]`
    /// and `c` `[m, n]`, or an error naming what does not fit.
    pub(crate) fn gemm_shape<T: Elem>(a: &Tensor<T>, b: &Tensor<T>, c: &Tensor<T>) -> Result<(usize, usize, usize)> {
        let (m, k) = matrix("a", a)?;
        let (n, kb) = matrix("b", b)?;
        if kb != k {
            return Err(Error::Shape(format!("a is [{m}, {k}] and b is [{n}, {kb}]: their inner dimensions differ")));
        }
        expect_shape("c", c, &[m, n])?;
        Ok((m, n, k))
    }

    /// A GEMM operand: a tensor used as stored, or transposed (`w.t()`), in
    /// the way `x @ w.T` reads in PyTorch. A 3-D tensor is a batch of
    /// matrices; a 2-D one is shared by every matrix of a batched product.
    #[derive(Clone, Copy)]
    pub struct Mat<'a, T> {
        tensor: &'a Tensor<T>,
        transposed: bool,
    }

    impl<'a, T> From<&'a Tensor<T>> for Mat<'a, T> {
        fn from(tensor: &'a Tensor<T>) -> Self {
            Mat { tensor, transposed: false }
        }
    }

    /// `t.t()`: the transpose of a (batch of) matrices, as a GEMM operand.
    pub trait Transpose<T> {
        fn t(&self) -> Mat<'_, T>;
    }
    impl<T> Transpose<T> for Tensor<T> {
        fn t(&self) -> Mat<'_, T> {
            Mat { tensor: self, transposed: true }
        }
    }

    /// Everything a `gemm_*_kernel` launch takes besides the tensors: the
    /// operands as strided views, so that ops built on the GEMM (grouped
    /// heads, padded hidden layers) can launch it on parts of tensors.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Plan {
        pub m: usize,
        pub n: usize,
        pub k: usize,
        pub batch: usize,
        /// Row strides of A, B and C (the residual has C's layout).
        pub ld: [usize; 3],
        /// Batch strides of A, B, C and the bias (0: shared by the batch).
        pub stride: [usize; 4],
        /// A stored `[k, m]`; B stored `[n, k]` (the kernels' `TA`, `TB`).
        pub ta: bool,
        pub tb: bool,
    }

    impl Plan {
        /// One row-major `C = A·Bᵀ`: A `[m, k]`, B `[n, k]`, C `[m, n]`.
        pub fn nt(m: usize, n: usize, k: usize) -> Plan {
            Plan { m, n, k, batch: 1, ld: [k, k, n], stride: [0; 4], ta: false, tb: true }
        }

        /// Every element the plan reads or writes lies inside its tensor
        /// (given their lengths), or an error naming the first that does not.
        pub fn check(&self, epi: Epi, [a, b, c, bias, residual]: [usize; 5]) -> Result<()> {
            let (m, n, k) = (self.m, self.n, self.k);
            // (what, rows, cols, row stride, batch stride, length)
            let a_dims = if self.ta { (k, m) } else { (m, k) };
            let b_dims = if self.tb { (n, k) } else { (k, n) };
            let mut views = vec![
                ("a", a_dims.0, a_dims.1, self.ld[0], self.stride[0], a),
                ("b", b_dims.0, b_dims.1, self.ld[1], self.stride[1], b),
                ("c", m, n, self.ld[2], self.stride[2], c),
            ];
            match epi.bias {
                Bias::PerColumn => views.push(("bias", 1, n, n, self.stride[3], bias)),
                Bias::PerRow => views.push(("bias", 1, m, m, self.stride[3], bias)),
                Bias::None => {}
            }
            if epi.residual {
                views.push(("residual", m, n, self.ld[2], self.stride[2], residual));
            }
            for (what, rows, cols, ld, stride, len) in views {
                if rows == 0 || cols == 0 || self.batch == 0 {
                    continue;
                }
                let end = (self.batch - 1) * stride + (rows - 1) * ld + cols;
                if ld < cols || end > len {
                    return Err(Error::Shape(format!(
                        "gemm: {what} as {} matrices of {rows}×{cols} (row stride {ld}, batch stride {stride}) needs {end} elements; it has {len}",
                        self.batch
                    )));
                }
            }
            Ok(())
        }
    }

    /// The [`Plan`] of `c = op(a)·op(b)`: `c` is `[m, n]` or `[batch, m, n]`,
    /// `op(a)` `[m, k]` and `op(b)` `[k, n]`, each 2-D or with c's batch.
    fn plan<T: Elem>(a: Mat<T>, b: Mat<T>, c: &Tensor<T>) -> Result<Plan> {
        expect_shape("c", c, c.shape())?;
        expect_shape("a", a.tensor, a.tensor.shape())?;
        expect_shape("b", b.tensor, b.tensor.shape())?;
        plan_shapes((a.tensor.shape(), a.transposed), (b.tensor.shape(), b.transposed), c.shape())
    }

    /// [`plan`] from the shapes as stored (and whether each operand is transposed).
    pub(crate) fn plan_shapes((a, ta): (&[usize], bool), (b, tb): (&[usize], bool), c: &[usize]) -> Result<Plan> {
        let (batch, m, n) = match *c {
            [m, n] => (1, m, n),
            [batch, m, n] => (batch, m, n),
            _ => return Err(Error::Shape(format!("c must be [m, n] or [batch, m, n]; it has shape {c:?}"))),
        };
        // (rows, cols) as stored, and the batch stride (0: shared).
        let stored = |what: &str, shape: &[usize]| match *shape {
            [r, c] => Ok((r, c, 0)),
            [bt, r, c] if bt == batch => Ok((r, c, r * c)),
            _ => Err(Error::Shape(format!("{what} has shape {shape:?}: expected 2-D, or 3-D with c's batch of {batch}"))),
        };
        let (ar, ac, sa) = stored("a", a)?;
        let (br, bc, sb) = stored("b", b)?;
        let ((am, ak), (bk, bn)) = (if ta { (ac, ar) } else { (ar, ac) }, if tb { (bc, br) } else { (br, bc) });
        if am != m || bn != n || ak != bk {
            let t = |x: bool| if x { "ᵀ" } else { "" };
            return Err(Error::Shape(format!(
                "a{} is [{am}, {ak}] and b{} is [{bk}, {bn}]: c must be [{am}, {bn}] and the inner dimensions equal; c is [{m}, {n}]",
                t(ta),
                t(tb)
            )));
        }
        Ok(Plan { m, n, k: ak, batch, ld: [ac, bc, n], stride: [sa, sb, m * n, 0], ta, tb })
    }

    /// A fused epilogue for [`gemm_nt_fused`]: `act(α·a·bᵀ + bias) + residual + β·c`.
    ///
    /// ```ignore
    /// let epi = Epilogue::new().bias_per_column(&b1).act(Act::GeluTanh).residual(&x);
    /// gemm_nt_fused(&gpu, &x, &w1, &mut y, &epi)?;
    /// ```
    #[derive(Clone, Copy)]
    pub struct Epilogue<'a, T> {
        alpha: f32,
        beta: f32,
        act: Act,
        bias: Option<(Bias, &'a Tensor<T>)>,
        residual: Option<&'a Tensor<T>>,
    }

    impl<'a, T: Elem> Default for Epilogue<'a, T> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<'a, T: Elem> Epilogue<'a, T> {
        /// Plain `c = a·bᵀ`.
        pub fn new() -> Self {
            let e = Epi::NONE;
            Epilogue { alpha: e.alpha, beta: e.beta, act: e.act, bias: None, residual: None }
        }
        /// Adds `bias[col]` to every row (`bias` is `[n]`).
        pub fn bias_per_column(self, bias: &'a Tensor<T>) -> Self {
            Epilogue { bias: Some((Bias::PerColumn, bias)), ..self }
        }
        /// Adds `bias[row]` to every column (`bias` is `[m]`).
        pub fn bias_per_row(self, bias: &'a Tensor<T>) -> Self {
            Epilogue { bias: Some((Bias::PerRow, bias)), ..self }
        }
        pub fn act(self, act: Act) -> Self {
            Epilogue { act, ..self }
        }
        /// Adds `residual` (`[m, n]`) after the activation.
        pub fn residual(self, residual: &'a Tensor<T>) -> Self {
            Epilogue { residual: Some(residual), ..self }
        }
        /// Scales the product by `alpha` (before the bias).
        pub fn scale(self, alpha: f32) -> Self {
            Epilogue { alpha, ..self }
        }
        /// Adds `beta` times c's previous contents.
        pub fn accumulate(self, beta: f32) -> Self {
            Epilogue { beta, ..self }
        }
        /// The bias tensor, if any.
        pub fn bias(&self) -> Option<&'a Tensor<T>> {
            self.bias.map(|(_, t)| t)
        }
        /// What the kernel is told.
        pub fn epi(&self) -> Epi {
            let bias = self.bias.map_or(Bias::None, |(kind, _)| kind);
            Epi { alpha: self.alpha, beta: self.beta, bias, act: self.act, residual: self.residual.is_some() }
        }
    }

    /// `c = epilogue(op(a)·op(b))` on the GPU, in one kernel: `a` is
    /// `[m, k]` or `x.t()` of a `[k, m]` tensor, `b` is `[k, n]` or `w.t()`
    /// of an `[n, k]` weight, `c` is `[m, n]`; with a leading batch
    /// dimension on `c` (and on `a` or `b`, else they are shared) it is a
    /// batched product. Every dimension may be any size.
    ///
    /// ```ignore
    /// gemm(&gpu, &x, w.t(), &mut y, &Epilogue::new().bias_per_column(&bias))?; // y = x·wᵀ + bias
    /// gemm(&gpu, x.t(), &dy, &mut dw, &Epilogue::new())?;                        // dw = xᵀ·dy
    /// ```
    pub fn gemm<'a, T: Elem>(gpu: &Gpu, a: impl Into<Mat<'a, T>>, b: impl Into<Mat<'a, T>>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        let (a, b) = (a.into(), b.into());
        let p = plan(a, b, c)?;
        // Every layout shares gemm_nt's config space and tuned table.
        let cfg = crate::tune::config(gpu.compute_capability(), "gemm_nt", gemm_nt_kernel::CONFIGS, &[p.m, p.n, p.k], || default_config(p.m * p.batch, p.n));
        gemm_with_config(gpu, cfg, a, b, c, epi)
    }

    /// `c = a·bᵀ` on the GPU: `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]`.
    pub fn gemm_nt<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        gemm(gpu, a, b.t(), c, &Epilogue::new())
    }

    /// `c = act(α·a·bᵀ + bias) + residual + β·c` on the GPU, in one kernel.
    pub fn gemm_nt_fused<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        gemm(gpu, a, b.t(), c, epi)
    }

    /// `gemm_nt_fused` with config `cfg` of `gemm_nt_kernel::CONFIGS` (for tests, sweeps and the tuner).
    pub fn gemm_nt_with_config<T: Elem>(gpu: &Gpu, cfg: usize, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        gemm_with_config(gpu, cfg, a, b.t(), c, epi)
    }

    /// [`gemm`] with config `cfg` of `gemm_nt_kernel::CONFIGS`.
    pub fn gemm_with_config<'a, T: Elem>(gpu: &Gpu, cfg: usize, a: impl Into<Mat<'a, T>>, b: impl Into<Mat<'a, T>>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        let (a, b) = (a.into(), b.into());
        let p = plan(a, b, c)?;
        match epi.bias {
            Some((Bias::PerRow, t)) => expect_shape("bias", t, &[p.m])?,
            Some((_, t)) => expect_shape("bias", t, &[p.n])?,
            None => {}
        }
        if let Some(t) = epi.residual {
            expect_shape("residual", t, c.shape())?;
        }
        launch_plan(gpu, Some(cfg), &p, a.tensor, b.tensor, c, epi)
    }

    /// Launches the `gemm_*_kernel` of `p`'s layout on views of whole
    /// tensors (config `cfg`, else the tuned one), after checking that every
    /// view lies inside its tensor.
    pub fn launch_plan<T: Elem>(gpu: &Gpu, cfg: Option<usize>, p: &Plan, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        check_dtype::<T>("gemm")?;
        let e = epi.epi();
        // Unused operands are placeholders the kernel never reads.
        let bias = epi.bias.map_or(a, |(_, t)| t);
        let residual = epi.residual.unwrap_or(a);
        for (what, t) in [("a", a), ("b", b), ("bias", bias), ("residual", residual)].into_iter().chain([("c", &*c)]) {
            if !t.is_contiguous() {
                return Err(Error::Shape(format!("gemm: {what} must be contiguous; its strides are {:?}", t.strides())));
            }
        }
        p.check(e, [a.numel(), b.numel(), c.numel(), bias.numel(), residual.numel()])?;
        let cfg = cfg.unwrap_or_else(|| {
            crate::tune::config(gpu.compute_capability(), "gemm_nt", gemm_nt_kernel::CONFIGS, &[p.m, p.n, p.k], || default_config(p.m * p.batch, p.n))
        });
        let (m, n, k, batch) = (p.m, p.n, p.k, p.batch);
        let ([lda, ldb, ldc], [sa, sb, sc, sbias]) = (p.ld, p.stride);
        macro_rules! launch {
            ($kernel:ident) => {
                $kernel::launch(gpu, cfg, a, b, c, bias, residual, m, n, k, batch, lda, ldb, ldc, sa, sb, sc, sbias, e.alpha, e.beta, e.flags())
            };
        }
        match (p.ta, p.tb) {
            (false, true) => launch!(gemm_nt_kernel),
            (false, false) => launch!(gemm_nn_kernel),
            (true, false) => launch!(gemm_tn_kernel),
            (true, true) => launch!(gemm_tt_kernel),
        }
    }

    /// [`launch_plan`] in the CPU interpreter, on slices (`bias` and
    /// `residual` may be empty where `epi` does not use them).
    #[allow(clippy::too_many_arguments)]
    pub fn launch_plan_cpu<T: Elem>(cfg: usize, p: &Plan, a: &[T], b: &[T], c: &mut [T], bias: &[T], residual: &[T], epi: Epi) {
        if let Err(e) = p.check(epi, [a.len(), b.len(), c.len(), bias.len(), residual.len()]) {
            panic!("{e}");
        }
        let (m, n, k, batch) = (p.m, p.n, p.k, p.batch);
        let ([lda, ldb, ldc], [sa, sb, sc, sbias]) = (p.ld, p.stride);
        macro_rules! run {
            ($kernel:ident) => {
                $kernel::cpu(cfg, a, b, c, bias, residual, m, n, k, batch, lda, ldb, ldc, sa, sb, sc, sbias, epi.alpha, epi.beta, epi.flags())
            };
        }
        match (p.ta, p.tb) {
            (false, true) => run!(gemm_nt_kernel),
            (false, false) => run!(gemm_nn_kernel),
            (true, false) => run!(gemm_tn_kernel),
            (true, true) => run!(gemm_tt_kernel),
        }
    }

    /// `a·bᵀ` in the CPU interpreter (`a` `[m, k]`, `b` `[n, k]`, row-major).
    pub fn gemm_nt_cpu<T: Elem>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
        assert_eq!(a.len(), m * k, "gemm_nt: a holds {} elements, not {m}×{k}", a.len());
        assert_eq!(b.len(), n * k, "gemm_nt: b holds {} elements, not {n}×{k}", b.len());
        let mut c = vec![T::default(); m * n];
        let e = Epi::NONE;
        launch_plan_cpu(default_config(m, n), &Plan::nt(m, n, k), a, b, &mut c, &[], &[], e);
        c
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
