//! FP8 attention forward on Hopper: Q, K and V in e4m3 with one scale per
//! 128 tokens of each head, f32 accumulation, bf16 or f16 out.
//!
//! Principles:
//!
//! - **Our own layout, made by our own quantizer.** [`quantize_heads`]
//!   writes Q and K as they were (`[batch, tokens, heads, d]`) and V
//!   transposed, `[batch, heads, d, tokens]`, because FP8 `wgmma` reads
//!   K-major operands only and `P·V`'s K is the keys. Within each 16 keys
//!   the columns of Vᵀ are permuted ([`rustile::wgmma::fp8_column`]): then
//!   the f32 probabilities a thread holds, rounded pairwise to e4m3, are
//!   already the register A operand of the FP8 `P·V`, with no shuffle
//!   between threads. Tokens past the end are zeros in Vᵀ (up to a multiple
//!   of 128), so no program masks V.
//! - **Scales fold into work the forward does anyway.** A block of 128
//!   tokens of one head is quantized as `x / s` with `s = amax / 448` (1 for
//!   a block of zeros, so that no scale is 0). Q's scale joins the softmax
//!   scale, each key block's K scale multiplies that block's exponent
//!   ([`rustile::AccSoftmax::step_scaled`]), and V's scales ride on the
//!   rescale of `O` the online softmax does at every block: `O` is kept in
//!   the current block's V units, so moving to block `j` multiplies it by
//!   `alpha · s_v(j−1) / s_v(j)` and the end by `s_v(last) / l`.
//! - **`P` in e4m3 loses no small values.** `P ≤ 1` would leave values
//!   below 2^-9 as zeros; the softmax makes `P` 2^8 times larger instead
//!   ([`rustile::AccSoftmax::with_gain`]), which `l` carries too.
//! - **The program is the bf16 forward's warp-specialized one**
//!   ([`super::attention_fwd_wgmma_kernel`] with `COPIER = 1`, `PING = 1`):
//!   one copy warpgroup, two multiplying warpgroups taking turns at the
//!   tensor cores (`PING = 1`; `PING = 0` lets them issue freely), each
//!   block's scores on the tensor cores beside the previous block's `P·V`.
use rustile::prelude::*;

/// Tokens of one head that share a scale (and the forward's query and key blocks).
pub const FP8_BLOCK: usize = 128;

/// `flags` bit of [`attention_quantize_kernel`]: write Vᵀ, keys permuted.
pub const TRANSPOSED: u32 = 1;

/// The largest e4m3 magnitude.
const E4M3_MAX: f32 = 448.0;

#[kernel(
    configs = [(D = 64, WARPS = 4), (D = 128, WARPS = 4)],
    grid = [cdiv(tokens, 128), heads, batch],
    dtypes = [bf16, f16],
)]
/// Tokens `128·b..` of head `h` of sequence `z` (`x` is `[batch, n, heads,
/// d]` with `d = D`; the first `tokens` of each sequence are quantized):
/// their scale `amax / 448` to `scales[(z·heads + h)·cdiv(tokens, 128) + b]`,
/// and the e4m3 values `x · (1/scale)` to `out`, as `[batch, tokens, heads, d]`
/// or, with [`TRANSPOSED`], `[batch, heads, d, tp]` (`tp` is `tokens`
/// rounded up to 128, zeros past `tokens`) with each 16 tokens in
/// [`rustile::wgmma::fp8_position`] order.
pub fn attention_quantize_kernel<T: Elem>(
    x: Ptr<T>, out: PtrMut<F8E4M3>, scales: PtrMut<f32>,
    batch: usize, n: usize, tokens: usize, heads: usize, d: usize, flags: u32,
) {
    const BT: usize = 128;
    let (b, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let (t0, blocks) = (b * BT, cdiv(tokens, BT));
    let src = x.offset(z * n * heads * d + h * d);
    let scale_at = (z * heads + h) * blocks + b;
    // The block's largest magnitude, in every column of a row vector (a
    // column reduction of the row maxima); its scale and reciprocal.
    macro_rules! scale_of {
        ($tile:expr, $R:expr, $C:expr) => {{
            let rows = $tile.map(rustile::math::abs).row_max();
            let amax = Tile::<f32, { $R }, { $C }>::zeros().zip_col(rows, |_, m| m).col_max();
            let s = amax.map(|a| if a > 0.0 && a < f32::INFINITY { a / E4M3_MAX } else { 1.0 });
            s.store(scales, scale_at, scale_at + 1);
            s.map(|s| 1.0 / s)
        }};
    }
    if flags & TRANSPOSED == 0 {
        let at = BlockPtr::<T, BT, D>::new(src, [tokens, d], [heads * d, 1], [t0, 0]);
        let tile = load(&at).cast::<f32>();
        let inv = scale_of!(tile, BT, D);
        let q = tile.zip_row(inv, |x, i| x * i).cast::<F8E4M3>();
        store(&BlockPtr::<F8E4M3, BT, D>::new(out.offset(z * tokens * heads * d + h * d), [tokens, d], [heads * d, 1], [t0, 0]), &q);
    } else {
        // Loaded transposed (a row is one column of the head, over 128
        // tokens), so that each thread's stores go along a row of Vᵀ.
        let tp = blocks * BT;
        let at = BlockPtr::<T, D, BT>::new(src, [d, tokens], [1, heads * d], [0, t0]);
        let tile = load(&at).cast::<f32>();
        let inv = scale_of!(tile, D, BT);
        let q = tile.zip_row(inv, |x, i| x * i).cast::<F8E4M3>();
        let dst = out.offset((z * heads + h) * d * tp);
        q.scatter(dst, |c, t| Some(c * tp + t0 + rustile::wgmma::fp8_position(t)));
    }
}

/// One block of 128 query rows of one head: `o` (`[batch, sq, heads, d]`)
/// and `lse` (`[batch, heads, sq]`) from [`quantize_heads`]' `q`, `k`
/// (`[batch, sq|sk, heads|kv_heads, d]`, `d = D`) and `vt`, with their
/// scales; `map_q`, `map_k`, `map_vt` their tensor maps (boxes of `BM×D`,
/// `BN×D` and `D×BN`). `flags` as [`super::attention_fwd_kernel`]'s
/// (causal; no variable lengths).
#[kernel(
    configs = [
        (D = 128, BM = 128, BN = 128, WARPS = 12, STAGES = 4, PING = 1, SMEM = 147592),
        (D = 128, BM = 128, BN = 128, WARPS = 12, STAGES = 2, PING = 1, SMEM = 81992),
        (D = 128, BM = 128, BN = 128, WARPS = 12, STAGES = 2, PING = 0, SMEM = 81992),
        (D = 64, BM = 128, BN = 128, WARPS = 12, STAGES = 2, PING = 1, SMEM = 41032),
        (D = 64, BM = 128, BN = 128, WARPS = 12, STAGES = 4, PING = 1, SMEM = 73864),
        (D = 64, BM = 128, BN = 128, WARPS = 12, STAGES = 2, PING = 0, SMEM = 41032),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
pub fn attention_fwd_fp8_kernel<T: Elem>(
    q: Ptr<F8E4M3>, k: Ptr<F8E4M3>, vt: Ptr<F8E4M3>, o: PtrMut<T>, lse: PtrMut<f32>,
    q_scale: Ptr<f32>, k_scale: Ptr<f32>, v_scale: Ptr<f32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize, scale: f32, flags: u32,
    map_q: u64, map_k: u64, map_vt: u64,
) {
    use crate::attention::{store_head, CAUSAL};
    use rustile::{tma, wgmma};
    // The multiplying threads: all but the copy warpgroup, 64 query rows a warpgroup.
    const TH: usize = THREADS - 128;
    const CONSUMERS: usize = TH / 128;
    const REGS: u32 = 240;
    type AccW<const N: usize> = rustile::Acc<BM, N, TH, true>;
    type Fp8<const R: usize, const C: usize> = rustile::Shared<F8E4M3, R, C, TH>;

    let (qb, h, z) = (program_id(0), program_id(1), program_id(2));
    let _ = batch;
    let causal = flags & CAUSAL != 0;
    let r0 = qb * BM;
    let kvh = h / (heads / kv_heads);
    let blocks = cdiv(if causal { sk.min(r0 + BM) } else { sk }, BN);
    // Vᵀ's rows: the keys rounded up to whole scale blocks.
    let tp = cdiv(sk, FP8_BLOCK) * FP8_BLOCK;
    let (kv_scales, vt_at) = ((z * kv_heads + kvh) * cdiv(sk, FP8_BLOCK), (z * kv_heads + kvh) * d * tp);
    let q_s = q_scale.read((z * heads + h) * cdiv(sq, FP8_BLOCK) + qb);
    let k_s = |j: usize| k_scale.read(kv_scales + j);
    let v_s = |j: usize| v_scale.read(kv_scales + j);

    // Shared memory: Q, then `STAGES` stages of K and Vᵀ, then the barriers
    // (as the bf16 program's: Q's, each stage's K and V landing, each
    // stage's K and V read by every multiplying thread).
    let at = wgmma::pad(TH);
    let sq_ = Fp8::<BM, D>::at(at);
    let stage = |j: usize| at + BM * D + (j % STAGES) * 2 * BN * D;
    let k_tile = |j: usize| Fp8::<BN, D>::at(stage(j));
    let vt_tile = |j: usize| Fp8::<D, BN>::at(stage(j) + BN * D);
    let landed = |i: usize| tma::Barrier::at::<TH>(at + BM * D + 2 * STAGES * BN * D + 8 * i);
    let kv_landed = |j: usize, which: usize| landed(1 + 2 * (j % STAGES) + which);
    let kv_read = |j: usize, which: usize| landed(1 + 2 * STAGES + 2 * (j % STAGES) + which);
    for i in 0..1 + 2 * STAGES {
        landed(i).init(1);
    }
    for i in 0..2 * STAGES {
        landed(1 + 2 * STAGES + i).init(TH as u32);
    }
    tma::fence_init();
    sync();
    // The copies, issued by the calling thread. Rows past a sequence are the
    // next one's (masked as scores, or never stored); Vᵀ past the keys is zero.
    let load_q = || {
        landed(0).expect_by_this_thread(BM * D);
        let window = rustile::BlockPtr::<F8E4M3, _, _, TH>::new(q.offset(h * d), [z * sq + sq, d], [heads * d, 1], [z * sq + r0, 0]);
        sq_.load_tma_by_this_thread(map_q, &window, h, &landed(0));
    };
    let load_kv = |j: usize, which: usize| {
        if j >= blocks {
            return;
        }
        let bar = kv_landed(j, which);
        bar.expect_by_this_thread(BN * D);
        if which == 0 {
            let window = rustile::BlockPtr::<F8E4M3, _, _, TH>::new(k.offset(kvh * d), [z * sk + sk, d], [kv_heads * d, 1], [z * sk + j * BN, 0]);
            k_tile(j).load_tma_by_this_thread(map_k, &window, kvh, &bar);
        } else {
            let window = rustile::BlockPtr::<F8E4M3, _, _, TH>::new(vt.offset(vt_at), [d, tp], [tp, 1], [0, j * BN]);
            vt_tile(j).load_tma_by_this_thread(map_vt, &window, z * kv_heads + kvh, &bar);
        }
    };
    let kv_wait = |j: usize, which: usize| kv_landed(j, which).wait((j / STAGES) % 2);
    let scores = |j: usize| {
        let mut sc = AccW::<BN>::zeros();
        wgmma::dot_async(&sq_, &k_tile(j), &mut sc);
        sc
    };
    let masked = |j: usize, sc: AccW<BN>| {
        let c0 = j * BN;
        if c0 + BN > sk || (causal && c0 + BN > r0 + 1) {
            sc.map(|r, c, x| if c0 + c >= sk || (causal && c0 + c > r0 + r) { f32::NEG_INFINITY } else { x })
        } else {
            sc
        }
    };

    // `P` is 2^8 times the probabilities (see the module doc).
    let mut stats = rustile::AccSoftmax::<BM, TH>::with_gain(scale * q_s, 8.0);
    let mut o_ = AccW::<D>::zeros();
    // The V scale `o_` is in.
    let mut v_units = 1.0;
    crate::attention::copy_warpgroup::<TH, false>(blocks, STAGES, load_q, load_kv, kv_read);
    wgmma::raise_registers::<REGS>();
    // The interpreter's one thread copies each block right before its scores.
    let on_cpu = cfg!(not(target_arch = "nvptx64"));
    let cpu_loads = |j: usize| {
        if on_cpu {
            load_kv(j, 0);
            load_kv(j, 1);
        }
    };
    if on_cpu {
        load_q();
    }
    landed(0).wait(0);
    if blocks > 0 {
        // `PING`: the warpgroups take turns at issuing their products.
        let turns = wgmma::Turns::<CONSUMERS>::new(PING == 1, 1);
        let add_pv = |p: &wgmma::PackedFp8<BM, BN, TH>, j: usize, o_: &mut AccW<D>| wgmma::dot_fp8_acc_async(p, &vt_tile(j), o_);
        cpu_loads(0);
        kv_wait(0, 0);
        turns.wait();
        let mut sc = scores(0);
        turns.pass(false);
        wgmma::wait::<0, BM, BN, TH>(&mut sc);
        kv_read(0, 0).arrive();
        let mut p = stats.step_scaled(masked(0, sc), k_s(0)).0.pack_e4m3();
        v_units = v_s(0);
        for j in 1..blocks {
            let (k_sj, v_sj) = (k_s(j), v_s(j));
            cpu_loads(j);
            kv_wait(j, 0);
            kv_wait(j - 1, 1);
            turns.wait();
            let mut sc = scores(j);
            add_pv(&p, j - 1, &mut o_);
            turns.pass(false);
            wgmma::wait::<1, BM, BN, TH>(&mut sc);
            kv_read(j, 0).arrive();
            let (pj, alpha) = stats.step_scaled(masked(j, sc), k_sj);
            wgmma::wait::<0, BM, D, TH>(&mut o_);
            kv_read(j - 1, 1).arrive();
            // Into block j's V units.
            let ratio = v_units / v_sj;
            o_ = o_.map_rows(&alpha.map(|a| a * ratio), |x, a| x * a);
            v_units = v_sj;
            p = pj.pack_e4m3();
        }
        kv_wait(blocks - 1, 1);
        turns.wait();
        add_pv(&p, blocks - 1, &mut o_);
        turns.pass(true);
        wgmma::wait::<0, BM, D, TH>(&mut o_);
    }
    let inv_l = stats.inv_l().map(|i| i * v_units);
    let out = o_.map_rows(&inv_l, |x, i| x * i);
    store_head(o.offset(z * sq * heads * d), [sq, heads * d, h * d, d], r0, &out, &out, false, 1.0);
    stats.lse().store(lse.offset((z * heads + h) * sq), r0, sq);
}

// ---- host API ----------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::super::{Attention, Dims, CAUSAL};
    use super::*;
    use crate::gemm::check_dtype;
    use rustile_host::{Error, Gpu, Result, Tensor, TileMap};

    /// How [`quantize_heads`] lays out what it writes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Fp8Layout {
        /// `[batch, tokens, heads, d]`, as the input: attention's Q and K.
        Tokens,
        /// `[batch, heads, d, tokens]` (tokens rounded up to 128, zeros
        /// past the end), each 16 tokens permuted: attention's V.
        ValuesT,
    }

    /// One of attention's inputs in e4m3 with a scale per 128 tokens of
    /// each head (`x ≈ data · scale`), as [`quantize_heads`] makes it.
    pub struct Fp8Heads {
        pub data: Tensor<F8E4M3>,
        /// `[batch, heads, cdiv(tokens, 128)]`.
        pub scales: Tensor<f32>,
        pub layout: Fp8Layout,
        /// `[batch, tokens, heads, d]` of the values it stands for.
        pub dims: [usize; 4],
    }

    /// `x` (`[batch, n, heads, d]`, bf16 or f16, d 64 or 128) in e4m3 for
    /// [`attention_fp8`]: its first `tokens` of each sequence (all, with
    /// `None`: give K and V the keys attention is to read, which replaces
    /// [`Attention::keys`]), one scale per 128 tokens of each head.
    ///
    /// ```ignore
    /// let (q8, k8, v8) = (quantize_heads(&gpu, &q, None, Fp8Layout::Tokens)?,
    ///                     quantize_heads(&gpu, &k, None, Fp8Layout::Tokens)?,
    ///                     quantize_heads(&gpu, &v, None, Fp8Layout::ValuesT)?);
    /// attention_fp8(&gpu, &q8, &k8, &v8, &mut o, &mut lse, Attention::causal())?;
    /// ```
    pub fn quantize_heads<T: Elem>(gpu: &Gpu, x: &Tensor<T>, tokens: Option<usize>, layout: Fp8Layout) -> Result<Fp8Heads> {
        check_dtype::<T>("quantize_heads")?;
        let &[batch, n, heads, d] = x.shape() else {
            return Err(Error::Shape(format!("quantize_heads: x must be [batch, tokens, heads, d]; it is {:?}", x.shape())));
        };
        if !x.is_contiguous() {
            return Err(Error::Shape(format!("quantize_heads: x must be contiguous; its strides are {:?}", x.strides())));
        }
        let cfg = fp8_config(attention_quantize_kernel::CONFIGS, d, "quantize_heads")?;
        let tokens = tokens.unwrap_or(n);
        if tokens > n {
            return Err(Error::Shape(format!("quantize_heads: tokens = {tokens}, but x holds {n} a sequence")));
        }
        let blocks = tokens.div_ceil(FP8_BLOCK);
        let data = match layout {
            Fp8Layout::Tokens => gpu.alloc::<F8E4M3>(&[batch, tokens, heads, d])?,
            Fp8Layout::ValuesT => gpu.alloc::<F8E4M3>(&[batch, heads, d, blocks * FP8_BLOCK])?,
        };
        let mut heads_ = Fp8Heads { data, scales: gpu.alloc::<f32>(&[batch, heads, blocks])?, layout, dims: [batch, tokens, heads, d] };
        if batch * blocks * heads > 0 {
            let flags = if layout == Fp8Layout::ValuesT { TRANSPOSED } else { 0 };
            attention_quantize_kernel::launch(gpu, cfg, x, &mut heads_.data, &mut heads_.scales, batch, n, tokens, heads, d, flags)?;
        }
        Ok(heads_)
    }

    /// The values `x` stands for, `[batch, tokens, heads, d]` in f32 (each
    /// e4m3 value times its block's scale, exactly): what [`attention_fp8`]
    /// computes with, for checking it.
    pub fn dequantize_heads(gpu: &Gpu, x: &Fp8Heads) -> Result<Vec<f32>> {
        let [batch, tokens, heads, d] = x.dims;
        let (data, scales) = (gpu.download(&x.data)?, gpu.download(&x.scales)?);
        let blocks = tokens.div_ceil(FP8_BLOCK);
        let mut out = vec![0.0; batch * tokens * heads * d];
        for z in 0..batch {
            for t in 0..tokens {
                for h in 0..heads {
                    let s = scales[(z * heads + h) * blocks + t / FP8_BLOCK];
                    for c in 0..d {
                        let at = match x.layout {
                            Fp8Layout::Tokens => ((z * tokens + t) * heads + h) * d + c,
                            Fp8Layout::ValuesT => ((z * heads + h) * d + c) * blocks * FP8_BLOCK + rustile::wgmma::fp8_position(t),
                        };
                        out[((z * tokens + t) * heads + h) * d + c] = data[at].to_f32() * s;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The config of `configs` (a `D` each: 64 and 128) for head dim `d`.
    fn fp8_config(configs: &[rustile::KernelConfig], d: usize, what: &str) -> Result<usize> {
        configs
            .iter()
            .position(|c| c.get("D") == Some(d))
            .ok_or_else(|| Error::Shape(format!("{what}: FP8 attention takes head dims 64 and 128, not {d}")))
    }

    /// `o = softmax(scale·q·kᵀ + mask)·v` per head from e4m3 inputs
    /// ([`quantize_heads`]: q and k [`Fp8Layout::Tokens`], v
    /// [`Fp8Layout::ValuesT`]), `o` `[batch, sq, heads, d]` bf16 or f16,
    /// `lse` `[batch, heads, sq]` as [`super::super::attention`]'s. Options:
    /// causal, the scale, GQA (fewer k/v heads), `config`; the keys are
    /// those k and v were quantized with (`Attention::keys` is refused), and
    /// there is no variable-length form. Hopper only.
    pub fn attention_fp8<T: Elem>(gpu: &Gpu, q: &Fp8Heads, k: &Fp8Heads, v: &Fp8Heads, o: &mut Tensor<T>, lse: &mut Tensor<f32>, opt: Attention) -> Result<()> {
        check_dtype::<T>("attention_fp8")?;
        if !attention_fwd_fp8_kernel::supported(gpu) {
            return Err(Error::Invalid(format!("attention_fp8 needs Hopper (sm_90); {} is sm_{}{}", gpu.name(), gpu.compute_capability().0, gpu.compute_capability().1)));
        }
        let dims = fp8_dims(q, k, v)?;
        let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
        if o.shape() != [batch, sq, heads, d] || lse.shape() != [batch, heads, sq] || !o.is_contiguous() || !lse.is_contiguous() {
            return Err(Error::Shape(format!(
                "attention_fp8: o must be {:?} and lse {:?}, contiguous; they are {:?} and {:?}",
                [batch, sq, heads, d],
                [batch, heads, sq],
                o.shape(),
                lse.shape()
            )));
        }
        if opt.keys.is_some() {
            return Err(Error::Invalid("attention_fp8: quantize k and v with the keys to read (quantize_heads' tokens) instead of Attention::keys".into()));
        }
        let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt());
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(Error::Invalid(format!("attention_fp8: the softmax scale must be positive and finite, not {scale}")));
        }
        let configs = attention_fwd_fp8_kernel::CONFIGS;
        let cfg = match opt.config {
            Some(c) if configs.get(c).is_some_and(|cf| cf.get("D") == Some(d)) => c,
            Some(c) => return Err(Error::Invalid(format!("attention_fp8: config {c} is not one of head dim {d}'s ({} configs)", configs.len()))),
            None => fp8_config(configs, d, "attention_fp8")?,
        };
        if batch * sq * heads == 0 {
            return Ok(());
        }
        let [bm, bn] = ["BM", "BN"].map(|p| configs[cfg].get(p).expect("every FP8 forward config names BM and BN"));
        let map = |t: &Tensor<F8E4M3>, dims: [usize; 3], boxes: [usize; 2]| {
            gpu.tensor_map(&TileMap {
                base: t.device_ptr(),
                dims: dims.map(|x| x as u64),
                strides: [(dims[0] * dims[2]) as u64, dims[0] as u64],
                boxes: [boxes[0] as u32, boxes[1] as u32, 1],
                elem_bytes: 1,
            })
        };
        // q, k: [d, tokens, heads] (a token is heads·d bytes on, a head d); vt: [tp, d, batch·kv_heads].
        let mq = map(&q.data, [d, batch * sq, heads], [d, bm])?;
        let mk = map(&k.data, [d, batch * sk, kv_heads], [d, bn])?;
        let tp = v.data.shape()[3];
        let mv = gpu.tensor_map(&TileMap {
            base: v.data.device_ptr(),
            dims: [tp as u64, d as u64, (batch * kv_heads) as u64],
            strides: [tp as u64, (d * tp) as u64],
            boxes: [bn as u32, d as u32, 1],
            elem_bytes: 1,
        })?;
        let flags = if opt.causal { CAUSAL } else { 0 };
        attention_fwd_fp8_kernel::launch(
            gpu, cfg, &q.data, &k.data, &v.data, o, lse, &q.scales, &k.scales, &v.scales,
            batch, sq, sk, heads, kv_heads, d, scale, flags, mq, mk, mv,
        )
    }

    /// The sizes of an FP8 problem, or why q, k and v do not make one.
    fn fp8_dims(q: &Fp8Heads, k: &Fp8Heads, v: &Fp8Heads) -> Result<Dims> {
        let [batch, sq, heads, d] = q.dims;
        let [bk, sk, kv_heads, dk] = k.dims;
        let layouts = (q.layout, k.layout, v.layout);
        if layouts != (Fp8Layout::Tokens, Fp8Layout::Tokens, Fp8Layout::ValuesT) {
            return Err(Error::Invalid(format!("attention_fp8: q, k and v must be quantized as Tokens, Tokens and ValuesT; they are {layouts:?}")));
        }
        if bk != batch || dk != d || v.dims != k.dims {
            return Err(Error::Shape(format!("attention_fp8: q {:?}, k {:?} and v {:?} ([batch, tokens, heads, d]) do not agree", q.dims, k.dims, v.dims)));
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(Error::Shape(format!("attention_fp8: {heads} query heads cannot share {kv_heads} key/value heads")));
        }
        if sk == 0 {
            return Err(Error::Shape("attention_fp8: k and v hold no keys".into()));
        }
        Ok(Dims { batch, sq, sk, heads, kv_heads, d })
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;
