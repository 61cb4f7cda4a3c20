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
/// stages. `fill(kt, stage)` issues the `cp.async` copies of k-step `kt`
/// into a stage, `STAGES − 1` steps ahead of `step(stage)`, which consumes
/// one; there is one barrier a step.
///
/// Mark both closures `#[inline(always)]`: a `step` full of MMAs is over
/// LLVM's inlining budget, and a step that is not inlined takes its
/// accumulators by reference, in local memory.
#[inline(always)]
pub fn pipeline<const STAGES: usize>(steps: usize, fill: impl Fn(usize, usize), mut step: impl FnMut(usize))
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
    // Fill all stages but one; every step then starts the copy STAGES − 1
    // steps ahead into the stage the previous step finished with.
    let (mut read, mut write) = (0, 0);
    for kt in 0..STAGES - 1 {
        fill(kt, write);
        write = next(write);
    }
    for kt in 0..steps {
        wait_copies::<{ STAGES as u32 - 2 }>();
        sync(); // step kt's stage is complete for everyone, and step kt−1's is free
        step(read);
        read = next(read);
        // Issued after the tensor-core work, so that each step starts reading
        // its operands right after the barrier; the copies then overlap the
        // MMAs still in flight.
        fill(kt + STAGES - 1, write);
        write = next(write);
    }
}

/// `A·Bᵀ` for the `BM×BN` block of C at `at`, with A `[m, k]` and B `[n, k]`
/// row-major: a [`pipeline`] of `cp.async` copies and `dot`s. Needs
/// `STAGES·(BM + BN)·BK·2` bytes of `SMEM`.
#[inline(always)]
pub fn mainloop<T: Elem, const BM: usize, const BN: usize, const BK: usize, const STAGES: usize, const TH: usize>(
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
    // Stage s holds A then B of one k-step.
    let stage = #[inline(always)]
    |s: usize| {
        let at = s * (BM + BN) * BK * 2;
        (Shared::<T, BM, BK, TH>::at(at), Shared::<T, BN, BK, TH>::at(at + BM * BK * 2))
    };
    let mut acc = rustile::Acc::<BM, BN, TH>::zeros();
    pipeline::<STAGES>(
        cdiv(k, BK),
        #[inline(always)]
        |kt, s| {
            let (sa, sb) = stage(s);
            sa.copy_from(&BlockPtr::rows(a, m, k, [at[0], kt * BK]));
            sb.copy_from(&BlockPtr::rows(b, n, k, [at[1], kt * BK]));
        },
        #[inline(always)]
        |s| {
            let (sa, sb) = stage(s);
            acc = dot(&sa, &sb, acc);
        },
    );
    acc
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
    pipeline::<STAGES>(
        cdiv(k, BK),
        #[inline(always)]
        |kt, s| {
            let (sa, sb1, sb2) = stage(s);
            sa.copy_from(&BlockPtr::rows(a, m, k, [at[0], kt * BK]));
            sb1.copy_from(&BlockPtr::rows(b1, n, k, [at[1], kt * BK]));
            sb2.copy_from(&BlockPtr::rows(b2, n, k, [at[1], kt * BK]));
        },
        #[inline(always)]
        |s| {
            let (sa, sb1, sb2) = stage(s);
            acc1 = dot(&sa, &sb1, acc1);
            acc2 = dot(&sa, &sb2, acc2);
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

gemm_kernel! {
grid = [cdiv(m, BM) * cdiv(n, BN)],
/// `C = act(α·A·Bᵀ + bias) + residual + β·C` (see [`Epi`]; `flags` is
/// `Epi::flags`). `bias` and `residual` are read only when the flags say so.
pub fn gemm_nt_kernel<T: Elem>(
    a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, bias: Ptr<T>, residual: Ptr<T>,
    m: usize, n: usize, k: usize, alpha: f32, beta: f32, flags: u32,
) {
    let at = block::<BM, BN>(m, n);
    let acc = mainloop::<T, BM, BN, BK, STAGES, THREADS>(a, b, m, n, k, at);
    let epi = Epi::from_flags(flags, alpha, beta);
    let out = BlockPtr::<T, BM, BN>::rows(c, m, n, at);
    // The per-element epilogue below is long code; a plain product (one
    // uniform test) skips it.
    if epi == Epi::NONE {
        store_acc(&out, &acc);
        return;
    }
    let res = BlockPtr::<T, BM, BN>::rows(residual, m, n, at);
    let (per_col, per_row) = (BlockPtr::<T, 1, BN>::rows(bias, 1, n, [0, at[1]]), BlockPtr::<T, BM, 1>::rows(bias, m, 1, [at[0], 0]));
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

    /// `(m, n, k)` of `c = a·bᵀ`, or an error naming what does not fit.
    pub(crate) fn gemm_shape<T: Elem>(a: &Tensor<T>, b: &Tensor<T>, c: &Tensor<T>) -> Result<(usize, usize, usize)> {
        let (m, k) = matrix("a", a)?;
        let (n, kb) = matrix("b", b)?;
        if kb != k {
            return Err(Error::Shape(format!("a is [{m}, {k}] and b is [{n}, {kb}]: their inner dimensions differ")));
        }
        expect_shape("c", c, &[m, n])?;
        Ok((m, n, k))
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
        /// What the kernel is told.
        pub fn epi(&self) -> Epi {
            let bias = self.bias.map_or(Bias::None, |(kind, _)| kind);
            Epi { alpha: self.alpha, beta: self.beta, bias, act: self.act, residual: self.residual.is_some() }
        }
    }

    /// `c = a·bᵀ` on the GPU: `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]`.
    pub fn gemm_nt<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        gemm_nt_fused(gpu, a, b, c, &Epilogue::new())
    }

    /// `c = act(α·a·bᵀ + bias) + residual + β·c` on the GPU, in one kernel.
    pub fn gemm_nt_fused<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        let (m, n, k) = gemm_shape(a, b, c)?;
        let cfg = crate::tune::config(gpu.compute_capability(), "gemm_nt", gemm_nt_kernel::CONFIGS, &[m, n, k], || default_config(m, n));
        gemm_nt_with_config(gpu, cfg, a, b, c, epi)
    }

    /// `gemm_nt_fused` with config `cfg` of `gemm_nt_kernel::CONFIGS` (for tests, sweeps and the tuner).
    pub fn gemm_nt_with_config<T: Elem>(gpu: &Gpu, cfg: usize, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        check_dtype::<T>("gemm_nt")?;
        let (m, n, k) = gemm_shape(a, b, c)?;
        let bias = match epi.bias {
            Some((Bias::PerRow, t)) => expect_shape("bias", t, &[m]).map(|_| t)?,
            Some((_, t)) => expect_shape("bias", t, &[n]).map(|_| t)?,
            None => a, // not read
        };
        let residual = match epi.residual {
            Some(t) => expect_shape("residual", t, &[m, n]).map(|_| t)?,
            None => a, // not read
        };
        let e = epi.epi();
        gemm_nt_kernel::launch(gpu, cfg, a, b, c, bias, residual, m, n, k, e.alpha, e.beta, e.flags())
    }

    /// `a·bᵀ` in the CPU interpreter (`a` `[m, k]`, `b` `[n, k]`, row-major).
    pub fn gemm_nt_cpu<T: Elem>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
        assert_eq!(a.len(), m * k, "gemm_nt: a holds {} elements, not {m}×{k}", a.len());
        assert_eq!(b.len(), n * k, "gemm_nt: b holds {} elements, not {n}×{k}", b.len());
        let mut c = vec![T::default(); m * n];
        let e = Epi::NONE;
        gemm_nt_kernel::cpu(default_config(m, n), a, b, &mut c, &[], &[], m, n, k, e.alpha, e.beta, e.flags());
        c
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
