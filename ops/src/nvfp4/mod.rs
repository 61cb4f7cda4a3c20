//! NVFP4: FP4 E2M1 values with one FP8 E4M3 scale per 16 consecutive values
//! along K, the operands of GPU MODE's NVFP4 dual GEMM
//! (`C = silu(A·B1ᵀ) ⊙ (A·B2ᵀ)`); here the formats, a quantize kernel, and
//! a float64 reference of the whole task.
//!
//! Principles:
//!
//! - **A quantized `[rows, k]` matrix is two tensors.** Its values are
//!   `[rows, k/2]` bytes of E2M1 pairs ([`F4E2M1x2`]: value `2i` in the low
//!   nibble), its scales `[rows, k/16]` e4m3 in the *plain* layout, row-major
//!   as the values. A batch is more rows: the task's `[M, K/2, L]` is
//!   L-major in memory, so batch `l`'s matrix is contiguous and these
//!   functions take one batch at a time (or all of them as `L·M` rows,
//!   where only the rows matter, as in quantizing).
//! - **The scales are "UE4M3": e4m3 used unsigned**, so [`F8E4M3`] holds them
//!   unchanged. Zeros and subnormals are ordinary scales (GPU MODE draws
//!   them uniformly from `[0, 1)`).
//! - **Dequantization is exact.** An E2M1 value times an e4m3 scale is exact
//!   in f32, and in f16 and bf16 too (the DSL's element tests check all
//!   16 × 254 products), so [`dequantize_cpu`], [`dequantize`] and a kernel that multiplies in
//!   16 bits see the same numbers.
//! - **Quantization follows NVIDIA's convention.** A block's scale is
//!   `amax / 6` rounded to e4m3 (nearest even, saturating at 448); its
//!   values are `x / scale`, with the scale as stored (decoded), rounded to
//!   E2M1 (nearest even, saturating at ±6). A block whose scale rounds to 0
//!   (all zeros, or `amax < 6·2^-10`) stores scale 0 and codes 0 rather than
//!   dividing by zero. NaNs are left out of the amax and encode as 0. There
//!   is no second, per-tensor scale: the task has none.
//! - **The kernel and the reference agree bit for bit.** Both divide (not
//!   multiply by a reciprocal, which rounds differently) in f32 with IEEE
//!   rounding, as `/` compiles to on the GPU (`div.rn.f32`), and both use the
//!   DSL's conversions.
//! - **The kernel sees a block of 16 as a row.** `[rows, k]` contiguous is
//!   `[rows·k/16, 16]`, so a block's amax is a row maximum, its scale one
//!   value of a [`Col`], and a 16-column tile is two 8-column chunks: each
//!   thread holds whole pairs, which it packs and stores itself
//!   ([`Tile::scatter_pairs`](rustile::Tile::scatter_pairs)).
//! - **The blocked layout is cuBLAS's** (what `torch._scaled_mm` and
//!   tcgen05's block-scaled MMA read): the scales of 128 rows × 4 blocks
//!   (64 of K) are one 512-byte atom, row `m` of the atom at
//!   `(m % 32)·16 + (m / 32)·4`, its 4 scales consecutive. Rows are padded
//!   to 128 and `k/16` to 4 with zero scales, as cuBLAS requires of a
//!   matrix whose sizes are not multiples ([`to_blocked`], [`from_blocked`]).
use rustile::prelude::*;

/// Values that share one scale.
pub const BLOCK: usize = 16;

#[kernel(
    configs = [(BR = 256, WARPS = 4)],
    grid = [cdiv(blocks, BR)],
    dtypes = [bf16, f16],
)]
/// Quantizes `blocks` blocks of 16 consecutive values of `x` (a contiguous
/// `[rows, k]` seen as `[blocks, 16]`, `blocks = rows·k/16`): block `b`'s
/// scale to `scales[b]`, its values as 8 E2M1 pairs to `q[8b ..]`.
pub fn nvfp4_quantize_kernel<T: Elem>(x: Ptr<T>, q: PtrMut<F4E2M1x2>, scales: PtrMut<F8E4M3>, blocks: usize) {
    let b0 = program_id(0) * BR;
    let values = load(&BlockPtr::<T, BR, BLOCK>::rows(x, blocks, BLOCK, [b0, 0])).cast::<f32>();
    // Starting from 0, `max` skips NaNs and leaves no −∞ for an all-NaN block.
    let amax = values.map(rustile::math::abs).reduce_rows(0.0, rustile::math::max);
    let scale = amax.map(|a| F8E4M3::from_f32(a / rustile::E2M1_MAX));
    scale.store(scales, b0, blocks);
    let scaled = values.zip_col(scale.map(|s| s.to_f32()), |x, s| if s > 0.0 { x / s } else { 0.0 });
    scaled.scatter_pairs(q, F4E2M1x2::encode, |r, j| (b0 + r < blocks).then(|| (b0 + r) * (BLOCK / 2) + j));
}

// ---- decoding: what GEMMs on NVFP4 operands read -----------------------------------------

/// The tile `[R, C]` of an NVFP4 operand at row `row0`, column `col0`
/// (a multiple of `C`, itself a multiple of 16), decoded to `T`: `words`
/// holds each row's values eight to a 32-bit word (`k / 8` a row), `scales`
/// one E4M3 a 16 values (`k / 16` a row). Rows past `rows` and columns
/// past `k` are zeros.
#[inline(always)]
pub fn decoded<T: Elem, const R: usize, const C: usize, const TH: usize>(
    words: Ptr<u32>, scales: Ptr<F8E4M3>, rows: usize, k: usize, at: [usize; 2],
) -> Tile<T, R, C, TH>
where
    [(); rustile::len(R, C, TH)]:,
{
    decoded_in_order::<T, R, C, TH>(words, scales, rows, k, at, |c| c)
}

/// [`decoded`] with the columns of each `C`-wide tile in another order:
/// column `c` of the tile holds the value at `col0 + position(c)`.
#[inline(always)]
pub fn decoded_in_order<T: Elem, const R: usize, const C: usize, const TH: usize>(
    words: Ptr<u32>, scales: Ptr<F8E4M3>, rows: usize, k: usize, [row0, col0]: [usize; 2], position: impl Fn(usize) -> usize,
) -> Tile<T, R, C, TH>
where
    [(); rustile::len(R, C, TH)]:,
{
    // No branch around the loads: an element outside reads element 0 (a
    // select of the index) and is zeroed after. Behind a branch, each load
    // was issued only once the one before it had returned (RESULTS, "The
    // NVFP4 dual GEMM's first kernel on the H100"). A thread holds whole
    // 8-column chunks, so in plain order a chunk's eight values share one
    // word and one scale.
    Tile::from_fn(|r, c| {
        let (row, col) = (row0 + r, col0 + position(c));
        let inside = row < rows && col < k;
        let (row, col) = if inside { (row, col) } else { (0, 0) };
        let word = words.read(row * (k / 8) + col / 8);
        let scale = scales.read(row * (k / 16) + col / 16).to_f32();
        let x = rustile::e2m1_to_f32((word >> (4 * (col % 8) as u32)) as u8) * scale;
        T::from_f32(if inside { x } else { 0.0 })
    })
}

/// The 16 values of one scale block (`words`: values `8i..8i+8` in word
/// `i`, value `2j` in the low nibble) times their `scale`, as eight f16
/// pairs, each **2⁻⁸ times** the decoded value, as the widening
/// warpgroups store them, in the order of [`run_slot`]
/// (values `r` and `r + 4` of a word share a pair). A code's bits placed
/// under an f16 exponent are its value times 2⁻¹⁴ (E2M1's subnormal 0.5 is
/// f16's subnormal 2⁻¹⁵), and one f16 product with the scale times 2⁶
/// gives value · scale · 2⁻⁸, exact: five significant bits, a multiple of
/// 2⁻¹⁸, at most 10.5. So a product's accumulator is 2⁸ times too small,
/// exactly, and the decode is a few integer instructions and one `mul.f16x2`
/// a pair. It is [`run_codes`] then [`run_scaled`], which a kernel may
/// place apart.
#[inline(always)]
pub fn run_f16x2(words: [u32; 2], scale: F8E4M3) -> [u32; 8] {
    run_scaled(run_codes(words), scale_f16x2(scale))
}

/// Where [`run_codes`] puts a run's value `r` (`r < 16`): slot `s` is
/// pair `s / 2`, half `s % 2`. Values `r` and `r + 4` of a word are 16
/// bits apart in it, as the two halves of a pair are, so one shift moves
/// both: pair `j` of word `i` holds values `8i + j` and `8i + j + 4`.
pub const fn run_slot(r: usize) -> usize {
    2 * (4 * (r / 8) + r % 4) + (r % 8) / 4
}

/// The run's value in slot `s` of [`run_codes`]' pairs ([`run_slot`]'s inverse).
pub const fn run_value(s: usize) -> usize {
    let (j, half) = (s / 2, s % 2);
    8 * (j / 4) + j % 4 + 4 * half
}

/// The position, within its 8-value chunk, of the value that [`run_f16x2`]'s
/// pairs put at column `col` when a thread stores them as two 16-byte chunks
/// of a row (pairs 0-3, then 4-7): the right operand of a product with such
/// a widened tile is stored in this order.
pub const fn chunk_k_position(col: usize) -> usize {
    let c = col % 8;
    col - c + c / 2 + 4 * (c % 2)
}

/// The codes of [`run_f16x2`] under an f16 exponent (2⁻¹⁴ times their
/// values), in [`run_slot`]'s order: two shifts and two masks a pair.
#[inline(always)]
pub fn run_codes(words: [u32; 2]) -> [u32; 8] {
    let mut out = [0u32; 8];
    for (i, &w) in words.iter().enumerate() {
        for j in 0..4 {
            // Values j and j + 4 at bits 0-3 and 16-19.
            let z = w >> (4 * j);
            // Magnitude bits (e1 e0 m) to f16 bits 9-11, the sign to bit 15, in each half.
            out[4 * i + j] = (z << 9) & 0x0e00_0e00 | (z << 12) & 0x8000_8000;
        }
    }
    out
}

/// A scale times 2⁶ as two f16 (≤ 448 · 64 and ≥ 2⁻⁹ · 64: normal, exact).
/// An e4m3's bits under an f16's exponent are the scale times 2⁻⁸, subnormals
/// included (both formats have the same subnormal step relative to their
/// bias), and one product by 2¹⁴ makes it 2⁶: three instructions, where a
/// conversion through f32 was two branchy routines.
#[inline(always)]
pub fn scale_f16x2(scale: F8E4M3) -> u32 {
    let b = scale.0 as u32;
    // The sign too, so that a negative scale byte means what `to_f32` says.
    let s = (b & 0x80) << 8 | (b & 0x7f) << 7;
    rustile::math::mul_f16x2(s | s << 16, 0x7400_7400)
}

/// [`run_codes`] times [`scale_f16x2`]: [`run_f16x2`]'s last step.
#[inline(always)]
pub fn run_scaled(codes: [u32; 8], scale: u32) -> [u32; 8] {
    let mut out = [0u32; 8];
    for j in 0..8 {
        out[j] = rustile::math::mul_f16x2(codes[j], scale);
    }
    out
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

#[kernel(
    configs = [(BR = 16, BC = 256, WARPS = 4)],
    grid = [cdiv(rows, BR), cdiv(k, BC)],
    dtypes = [f16],
)]
/// [`nvfp4_dequantize_kernel`] with each 8 columns in the order of
/// [`chunk_k_position`], as `dual_gemm_nvfp4_ws_kernel` reads its A.
pub fn nvfp4_dequantize_chunks_kernel<T: Elem>(words: Ptr<u32>, scales: Ptr<F8E4M3>, out: PtrMut<T>, rows: usize, k: usize) {
    let at = [program_id(0) * BR, program_id(1) * BC];
    let t = decoded_in_order::<T, BR, BC, THREADS>(words, scales, rows, k, at, chunk_k_position);
    store(&BlockPtr::rows(out, rows, k, at), &t);
}

#[kernel(
    configs = [(BR = 32, BC = 32, WARPS = 4)],
    grid = [cdiv(steps, BC), 4 * cdiv(rows, 128)],
    dtypes = [f32],
)]
/// Plain scales as words of four (`[rows, steps]`: a row's four scales of
/// each 64-deep step) into cuBLAS's blocked layout (`[rows/128, steps]`
/// atoms of 128 words, rows padded to 128 with zeros), where one step's
/// scales of 128 rows are 512 consecutive bytes: one copy. Row `r` of an
/// atom is its word `(r % 32)·4 + r / 32`, so each quarter of the rows is a
/// plain strided block. The words move as `f32` bits, untouched.
pub fn nvfp4_scales_blocked_kernel<T: Elem>(plain: Ptr<T>, blocked: PtrMut<T>, rows: usize, steps: usize) {
    let (quarter, atom_row) = (program_id(1) % 4, program_id(1) / 4);
    let kt0 = program_id(0) * BC;
    let tile = load(&BlockPtr::<T, BR, BC>::rows(plain, rows, steps, [atom_row * 128 + quarter * 32, kt0]));
    let out = blocked.offset(atom_row * steps * 128 + quarter);
    store(&BlockPtr::<T, BR, BC>::new(out, [32, steps], [4, 128], [0, kt0]), &tile);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::expect_shape;
    use rustile_host::{Error, Gpu, Result, Tensor};

    // ---- formats on the host ---------------------------------------------------------------

    /// Why `k` values a row cannot be NVFP4, or `None`.
    fn k_error(k: usize) -> Option<String> {
        (k == 0 || !k.is_multiple_of(BLOCK)).then(|| format!("NVFP4 rows hold a multiple of {BLOCK} values (one scale per {BLOCK}); k = {k}"))
    }

    /// `rows×k` values and their plain scales, or a panic naming what does not fit
    /// (the CPU helpers' inputs are the caller's own arrays).
    fn assert_sizes(what: &str, q: usize, scales: usize, rows: usize, k: usize) {
        if let Some(why) = k_error(k) {
            panic!("{what}: {why}");
        }
        assert_eq!(q, rows * k / 2, "{what}: {q} bytes of values, not {rows}×{k}/2");
        assert_eq!(scales, rows * k / BLOCK, "{what}: {scales} scales, not {rows}×{k}/{BLOCK}");
    }

    /// The scale and codes of one block, NVIDIA's way (see the module doc):
    /// the reference the kernel is checked against, written as plain loops.
    fn quantize_block(x: &[f32]) -> (F8E4M3, [F4E2M1x2; BLOCK / 2]) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = F8E4M3::from_f32(amax / rustile::E2M1_MAX);
        let s = scale.to_f32();
        let code = |v: f32| if s > 0.0 { v / s } else { 0.0 };
        (scale, core::array::from_fn(|j| F4E2M1x2::encode(code(x[2 * j]), code(x[2 * j + 1]))))
    }

    /// `x` (`[rows, k]`, row-major) in NVFP4 on the CPU: `(values [rows, k/2],
    /// scales [rows, k/16])`, the scales in the plain layout.
    pub fn quantize_cpu<T: Elem>(x: &[T], rows: usize, k: usize) -> (Vec<F4E2M1x2>, Vec<F8E4M3>) {
        assert_sizes("quantize_cpu", x.len() / 2, x.len() / BLOCK, rows, k);
        let (mut q, mut scales) = (Vec::with_capacity(x.len() / 2), Vec::with_capacity(x.len() / BLOCK));
        for block in x.chunks(BLOCK) {
            let values: Vec<f32> = block.iter().map(|v| v.to_f32()).collect();
            let (scale, codes) = quantize_block(&values);
            scales.push(scale);
            q.extend(codes);
        }
        (q, scales)
    }

    /// The `[rows, k]` values that `q` and its plain `scales` stand for, exactly.
    pub fn dequantize_cpu(q: &[F4E2M1x2], scales: &[F8E4M3], rows: usize, k: usize) -> Vec<f32> {
        assert_sizes("dequantize", q.len(), scales.len(), rows, k);
        let mut out = Vec::with_capacity(rows * k);
        for (pairs, scale) in q.chunks(BLOCK / 2).zip(scales) {
            let s = scale.to_f32();
            out.extend(pairs.iter().flat_map(|p| p.decode().map(|v| v * s)));
        }
        out
    }

    /// Bytes of one matrix's scales in the blocked layout: rows padded to
    /// 128, `k/16` to 4.
    pub fn blocked_len(rows: usize, k: usize) -> usize {
        rows.div_ceil(128) * 128 * (k / BLOCK).div_ceil(4) * 4
    }

    /// Where scale `kb` (of K values `16·kb ..`) of row `m` sits in the
    /// blocked layout of a matrix `k` wide: atoms of 128 rows × 4 scales
    /// (512 bytes) in row-block-major order; in an atom, row `m` at
    /// `(m % 32)·16 + (m % 128 / 32)·4`, its 4 scales consecutive.
    pub fn blocked_offset(m: usize, kb: usize, k: usize) -> usize {
        let atoms_along_k = (k / BLOCK).div_ceil(4);
        ((m / 128) * atoms_along_k + kb / 4) * 512 + (m % 32) * 16 + (m % 128 / 32) * 4 + kb % 4
    }

    /// Plain scales (`[rows, k/16]`) in the blocked layout, the padding zeros.
    pub fn to_blocked(scales: &[F8E4M3], rows: usize, k: usize) -> Vec<F8E4M3> {
        assert_sizes("to_blocked", rows * k / 2, scales.len(), rows, k);
        let mut out = vec![F8E4M3(0); blocked_len(rows, k)];
        for (i, s) in scales.iter().enumerate() {
            out[blocked_offset(i / (k / BLOCK), i % (k / BLOCK), k)] = *s;
        }
        out
    }

    /// The plain scales (`[rows, k/16]`) of a blocked layout (its padding dropped).
    pub fn from_blocked(blocked: &[F8E4M3], rows: usize, k: usize) -> Vec<F8E4M3> {
        assert_sizes("from_blocked", rows * k / 2, rows * k / BLOCK, rows, k);
        assert_eq!(blocked.len(), blocked_len(rows, k), "from_blocked: {} bytes, not the {} of {rows}×{k}'s blocked scales", blocked.len(), blocked_len(rows, k));
        (0..rows * k / BLOCK).map(|i| blocked[blocked_offset(i / (k / BLOCK), i % (k / BLOCK), k)]).collect()
    }

    // ---- the quantize kernel's host API ----------------------------------------------------

    /// `x` (`[..., k]`, bf16 or f16, contiguous; `k` a multiple of 16) in
    /// NVFP4: its values to `q` (`[..., k/2]`), its scales to `scales`
    /// (`[..., k/16]`, plain layout), both contiguous, as [`quantize_cpu`]
    /// makes them, bit for bit.
    pub fn quantize<T: Elem>(gpu: &Gpu, x: &Tensor<T>, q: &mut Tensor<F4E2M1x2>, scales: &mut Tensor<F8E4M3>) -> Result<()> {
        crate::gemm::check_dtype::<T>("nvfp4::quantize")?;
        let Some((&k, lead)) = x.shape().split_last() else {
            return Err(Error::Shape("nvfp4::quantize: x must have at least one dimension (its rows' k values)".into()));
        };
        if let Some(why) = k_error(k) {
            return Err(Error::Shape(format!("nvfp4::quantize: {why}")));
        }
        let with_last = |last: usize| lead.iter().copied().chain([last]).collect::<Vec<_>>();
        if q.shape() != with_last(k / 2) || scales.shape() != with_last(k / BLOCK) {
            return Err(Error::Shape(format!(
                "nvfp4::quantize: for x {:?}, q must be {:?} and scales {:?}; they are {:?} and {:?}",
                x.shape(),
                with_last(k / 2),
                with_last(k / BLOCK),
                q.shape(),
                scales.shape()
            )));
        }
        if !x.is_contiguous() || !q.is_contiguous() || !scales.is_contiguous() {
            return Err(Error::Shape("nvfp4::quantize: x, q and scales must be contiguous".into()));
        }
        nvfp4_quantize_kernel::launch(gpu, 0, x, q, scales, x.numel() / BLOCK)
    }

    // ---- the task's reference --------------------------------------------------------------

    /// GPU MODE's NVFP4 dual GEMM for one batch, in float64 from the exactly
    /// dequantized operands: `silu(A·B1ᵀ) ⊙ (A·B2ᵀ)`, `[m, n]` row-major.
    /// `a` is `[m, k/2]`, `b1` and `b2` `[n, k/2]`, the scales plain
    /// (`[m|n, k/16]`).
    #[allow(clippy::too_many_arguments)]
    pub fn dual_gemm_nvfp4_ref(
        a: &[F4E2M1x2], sfa: &[F8E4M3], b1: &[F4E2M1x2], sfb1: &[F8E4M3], b2: &[F4E2M1x2], sfb2: &[F8E4M3],
        m: usize, n: usize, k: usize,
    ) -> Vec<f64> {
        let wide = |q: &[F4E2M1x2], s: &[F8E4M3], rows: usize| dequantize_cpu(q, s, rows, k).into_iter().map(f64::from).collect::<Vec<_>>();
        let a = wide(a, sfa, m);
        let gate = crate::reference::matmul_nt(&a, &wide(b1, sfb1, n), m, n, k);
        let up = crate::reference::matmul_nt(&a, &wide(b2, sfb2, n), m, n, k);
        crate::reference::swiglu(&gate, &up)
    }

    // ---- NVFP4 operands on the device, and their exact dequantization -----------------------

    /// An NVFP4 matrix of `rows × k` values: `values` `[rows, k/2]` (E2M1
    /// pairs, K-major), `scales` `[rows, k/16]` (E4M3, the plain layout;
    /// [`from_blocked`] for cuBLAS's), as the kernels take it: `k` a multiple of 64.
    #[derive(Clone, Copy)]
    pub struct Nvfp4<'a> {
        pub values: &'a Tensor<F4E2M1x2>,
        pub scales: &'a Tensor<F8E4M3>,
    }

    impl Nvfp4<'_> {
        /// `[rows, k]`, or an error naming `what` when its two tensors disagree.
        pub fn dims(&self, what: &str) -> Result<[usize; 2]> {
            let &[rows, half] = self.values.shape() else {
                return Err(Error::Shape(format!("nvfp4: {what}'s values must be [rows, k/2]; they have shape {:?}", self.values.shape())));
            };
            let k = 2 * half;
            if k % 64 != 0 {
                return Err(Error::Shape(format!("nvfp4: k = {k} is not a multiple of 64 (the kernels' K step; pad K with zeros)")));
            }
            expect_shape(&format!("{what}'s scales"), self.scales, &[rows, k / 16])?;
            Ok([rows, k])
        }

        /// The values as 32-bit words of eight, as the kernel reads them.
        pub fn words(&self, [rows, k]: [usize; 2]) -> Result<Tensor<u32>> {
            self.values.view_as(&[rows, k / 8])
        }
    }

    /// `x`'s plain scales (`[rows, k/16]`) in cuBLAS's blocked layout on
    /// the device: `out` holds [`blocked_len`]`(rows, k)` bytes.
    pub fn scales_to_blocked(gpu: &Gpu, x: Nvfp4, out: &mut Tensor<F8E4M3>) -> Result<()> {
        let [rows, k] = x.dims("x")?;
        expect_shape("out", out, &[blocked_len(rows, k)])?;
        if rows * k == 0 {
            return Ok(());
        }
        let plain = x.scales.view_as::<f32>(&[rows, k / 64])?;
        let mut words = out.view_as::<f32>(&[blocked_len(rows, k) / 4])?;
        nvfp4_scales_blocked_kernel::launch(gpu, 0, &plain, &mut words, rows, k / 64)
    }

    /// `out` `[rows, k]` (f16 or bf16) = `x` dequantized, exactly; `k` a
    /// multiple of 64.
    pub fn dequantize<T: Elem>(gpu: &Gpu, x: Nvfp4, out: &mut Tensor<T>) -> Result<()> {
        crate::gemm::check_dtype::<T>("nvfp4::dequantize")?;
        let [rows, k] = x.dims("x")?;
        expect_shape("out", out, &[rows, k])?;
        if rows * k == 0 {
            return Ok(());
        }
        nvfp4_dequantize_kernel::launch(gpu, 0, &x.words([rows, k])?, x.scales, out, rows, k)
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
