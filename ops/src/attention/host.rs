//! Host API of the attention forward: checks, config choice, launch, and
//! the CPU interpreter's entries.
use super::*;
use crate::gemm::check_dtype;
use rustile_host::{Error, Gpu, Result, Tensor, TileMap};

/// Options of [`attention`]. `Attention::default()` is plain attention over
/// every key with `scale = 1/sqrt(d)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Attention {
    /// Query `i` sees keys `j ≤ i` (top-left aligned, as PyTorch's `is_causal`).
    pub causal: bool,
    /// The softmax scale; `None` is `1/sqrt(d)`. Positive.
    pub scale: Option<f32>,
    /// Use only the first `keys` keys and values of each sequence (the
    /// rectangular case: `M+N` queries over the `M` context points); `None`:
    /// all of them. Fixed-length batches only (variable ones give each
    /// sequence's key count in [`SeqLens`]).
    pub keys: Option<usize>,
    /// Run config `config` of Hopper's forward ([`attention_fwd_wgmma_kernel`]`::CONFIGS`,
    /// one whose `D` holds the head dim) instead of the tuned one: for the
    /// tuner, the tests and sweeps. On other GPUs an error; the backward
    /// ignores it.
    pub config: Option<usize>,
}

impl Attention {
    pub fn causal() -> Self {
        Attention { causal: true, ..Self::default() }
    }
    pub fn scale(self, scale: f32) -> Self {
        Attention { scale: Some(scale), ..self }
    }
    pub fn keys(self, keys: usize) -> Self {
        Attention { keys: Some(keys), ..self }
    }
    pub fn config(self, config: usize) -> Self {
        Attention { config: Some(config), ..self }
    }
}

/// Sizes of one attention problem: `batch` sequences of `sq` queries and
/// `sk` keys (the key tensors' rows; [`Attention::keys`] may use fewer),
/// `heads` query heads, `kv_heads` key/value heads, head dim `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub sq: usize,
    pub sk: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub d: usize,
}

/// Whether the kernels take head dim `d`: a multiple of 8 up to 128,
/// padded on chip to the narrowest config that holds it.
pub fn check_head_dim(d: usize) -> Result<()> {
    if d == 0 || d % 8 != 0 || d > 128 {
        return Err(Error::Shape(format!(
            "attention: head dim {d} is not supported; it must be a multiple of 8 up to 128 (64, 72, 96 and 128 are benchmarked)"
        )));
    }
    Ok(())
}

/// The first of a kernel's `configs` (all list D = 64, 80, 96, 128) whose
/// padded head dim holds `d`; with `RUSTILE_ATTENTION_CONFIG` set to
/// comma-separated name parts (say `BM128_BN128`, or one part for the
/// forward and one for the backward) the first of that same padded head dim
/// that also has one of them in its name, where one does (so that a part
/// that names a knob, `COPIER1`, never sends head dim 72 to D = 128's config).
fn config_in(configs: &[rustile::KernelConfig], d: usize) -> usize {
    let first = crate::pick_config(configs, |c| c.get("D").unwrap() >= d);
    let dp = configs[first].get("D");
    forced_config()
        .iter()
        .flat_map(|parts| parts.split(','))
        .find_map(|part| configs.iter().position(|c| c.get("D") == dp && c.name.contains(part)))
        .unwrap_or(first)
}

/// Whether Hopper's dK/dV config `kv` makes dQ too (`DQ = 1`).
fn makes_dq(kv: usize) -> bool {
    attention_bwd_kv_wgmma_kernel::CONFIGS[kv].get("DQ") == Some(1)
}

/// `RUSTILE_ATTENTION_CONFIG`, read once.
fn forced_config() -> Option<&'static str> {
    static FORCED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FORCED.get_or_init(|| std::env::var("RUSTILE_ATTENTION_CONFIG").ok()).as_deref()
}

/// The tuned table's bucket of a Hopper forward (`tuned/sm90.toml`, op
/// `attention`): the config's head dim `dp` (64, 80, 96 or 128), the mask,
/// and the query and key lengths rounded up to powers of two (at least 128).
pub fn forward_bucket(dp: usize, causal: bool, sq: usize, sk: usize) -> String {
    let up = |n: usize| n.max(128).next_power_of_two();
    format!("d{dp}_{}_{}x{}", if causal { "causal" } else { "full" }, up(sq), up(sk))
}

/// What a launch takes once the arguments passed [`check_opts`].
pub(super) struct Checked {
    keys: usize,
    scale: f32,
    flags: u32,
    /// [`Attention::config`], checked against the head dim.
    config: Option<usize>,
}

/// The checks shared by the GPU and CPU entries.
pub(super) fn check_opts(dims: &Dims, opt: &Attention, varlen: bool) -> Result<Checked> {
    let Dims { sk, heads, kv_heads, d, .. } = *dims;
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::Shape(format!("attention: {heads} query heads cannot share {kv_heads} key/value heads (heads must be a multiple of kv_heads)")));
    }
    check_head_dim(d)?;
    let keys = match opt.keys {
        Some(_) if varlen => return Err(Error::Invalid("attention_varlen: give each sequence's key count in SeqLens, not Attention::keys".into())),
        Some(n) if n > sk => return Err(Error::Shape(format!("attention: keys = {n}, but k and v hold {sk} per sequence"))),
        Some(n) => n,
        None => sk,
    };
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt());
    if !(scale > 0.0 && scale.is_finite()) {
        return Err(Error::Invalid(format!("attention: the softmax scale must be positive and finite, not {scale}")));
    }
    let flags = if opt.causal { CAUSAL } else { 0 } | if varlen { VARLEN } else { 0 };
    let config = opt.config.map(|c| checked_config(c, d)).transpose().map_err(Error::Invalid)?;
    Ok(Checked { keys, scale, flags, config })
}

/// A tensor of exactly `shape` (contiguous), named in the error.
fn expect(what: &str, shape: &[usize], want: &[usize]) -> Result<()> {
    if shape != want {
        return Err(Error::Shape(format!("attention: {what} has shape {shape:?}, expected {want:?}")));
    }
    Ok(())
}

/// The sizes of `q [batch, sq, heads, d]` and `k`, `v [batch, sk, kv_heads, d]`.
fn dims_of<T: Elem>(q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>) -> Result<Dims> {
    let (&[batch, sq, heads, d], &[bk, sk, kv_heads, dk]) = (q.shape(), k.shape()) else {
        return Err(Error::Shape(format!(
            "attention: q must be [batch, sq, heads, d] and k [batch, sk, kv_heads, d]; they are {:?} and {:?}",
            q.shape(),
            k.shape()
        )));
    };
    if bk != batch || dk != d {
        return Err(Error::Shape(format!("attention: q is {:?} and k {:?}: batch and head dim must agree", q.shape(), k.shape())));
    }
    expect("v", v.shape(), k.shape())?;
    Ok(Dims { batch, sq, sk, heads, kv_heads, d })
}

fn contiguous<T: Elem>(ts: [(&str, &Tensor<T>); 3]) -> Result<()> {
    for (what, t) in ts {
        if !t.is_contiguous() {
            return Err(Error::Shape(format!("attention: {what} must be contiguous; its strides are {:?}", t.strides())));
        }
    }
    Ok(())
}

/// `o = softmax(scale·q·kᵀ + mask)·v` per head, and each query's
/// log-sum-exp (`lse [batch, heads, sq]`, natural log, of the scaled
/// scores; −∞ for a query that sees no key).
///
/// `q`, `o` are `[batch, sq, heads, d]`, `k`, `v` `[batch, sk, kv_heads,
/// d]`, contiguous, bf16 or f16.
///
/// ```ignore
/// // 16 heads of 72 over 256 tokens, 64 images; then a causal, GQA decoder layer.
/// attention(&gpu, &q, &k, &v, &mut o, &mut lse, Attention::default())?;
/// attention(&gpu, &q, &k, &v, &mut o, &mut lse, Attention::causal())?;
/// // Neural process: 10k context + 1k targets attend to the context (k, v hold all 11k rows).
/// attention(&gpu, &q, &k, &v, &mut o, &mut lse, Attention::default().keys(10_000))?;
/// ```
pub fn attention<T: Elem>(gpu: &Gpu, q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>, o: &mut Tensor<T>, lse: &mut Tensor<f32>, opt: Attention) -> Result<()> {
    check_dtype::<T>("attention")?;
    let dims = dims_of(q, k, v)?;
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    contiguous([("q", q), ("k", k), ("v", v)])?;
    expect("o", o.shape(), q.shape())?;
    expect("lse", lse.shape(), &[batch, heads, sq])?;
    if !o.is_contiguous() || !lse.is_contiguous() {
        return Err(Error::Shape("attention: o and lse must be contiguous".into()));
    }
    let Checked { keys, scale, flags, config } = check_opts(&dims, &opt, false)?;
    if batch * sq * heads == 0 {
        return Ok(());
    }
    let none = gpu.alloc::<u32>(&[0])?;
    forward_on_gpu(gpu, config, [q, k, v], o, lse, [&none, &none], [batch, sq, keys, heads, kv_heads, d, sq, sk, sq], scale, flags)
}

/// Which programs run, forward and backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `mma.sync` ([`attention_fwd_kernel`], [`attention_bwd_kv_kernel`],
    /// [`attention_bwd_q_kernel`]): any GPU from sm_80.
    Mma,
    /// `wgmma` ([`attention_fwd_wgmma_kernel`], [`attention_bwd_kv_wgmma_kernel`],
    /// [`attention_bwd_q_wgmma_kernel`]): Hopper (sm_90a).
    Wgmma,
}

impl Program {
    /// The faster programs `gpu` has for head dim `d`: `wgmma` on Hopper at
    /// 64, 72-80 and 128 (at 72, for the vision encoder, the forward ties
    /// `mma.sync` and the backward is 1.6× faster, bench/RESULTS.md); at 96
    /// `mma.sync` (`wgmma` not measured there). `RUSTILE_ATTENTION=mma` picks
    /// the portable ones everywhere, `RUSTILE_ATTENTION=wgmma` Hopper's
    /// wherever they have the head dim (the forward all, the backward up to
    /// 80 and 128).
    pub fn on(gpu: &Gpu, d: usize) -> Program {
        static FORCED: std::sync::OnceLock<Option<Program>> = std::sync::OnceLock::new();
        let forced = *FORCED.get_or_init(|| match std::env::var("RUSTILE_ATTENTION").as_deref() {
            Ok("mma") => Some(Program::Mma),
            Ok("wgmma") => Some(Program::Wgmma),
            _ => None,
        });
        let hopper = attention_fwd_wgmma_kernel::supported(gpu);
        match forced {
            Some(Program::Wgmma) if hopper => Program::Wgmma,
            Some(_) => Program::Mma,
            None if hopper && (d % 64 == 0 || (65..=80).contains(&d)) => Program::Wgmma,
            None => Program::Mma,
        }
    }

    /// The backward's programs for head dim `d`: [`Program::on`]'s where
    /// they have a backward there, else the portable ones.
    pub fn backward_on(gpu: &Gpu, d: usize) -> Program {
        match Program::on(gpu, d) {
            p if p.has_backward(d) => p,
            _ => Program::Mma,
        }
    }

    /// Whether the program has a backward at head dim `d`: `wgmma`'s has
    /// configs for 64, 80 and 128 (none for 96: a 32-column tail).
    pub fn has_backward(self, d: usize) -> bool {
        self == Program::Mma || d <= 80 || d % 64 == 0
    }

    /// The forward's config for head dim `d` (checked by [`check_head_dim`])
    /// with `flags` at `sq` queries over `sk` keys (the longest sequences of
    /// a variable-length batch). Hopper's (`cc`: the GPU's; `None`, the
    /// interpreter) is the tuned table's winner for the bucket
    /// ([`forward_bucket`]), else the first config that holds `d` (the
    /// hand-picked one); `RUSTILE_ATTENTION_CONFIG` overrides both.
    pub(super) fn forward_config(self, cc: Option<(u32, u32)>, d: usize, flags: u32, sq: usize, sk: usize) -> usize {
        let configs = match self {
            Program::Mma => return config_in(attention_fwd_kernel::CONFIGS, d),
            Program::Wgmma => attention_fwd_wgmma_kernel::CONFIGS,
        };
        let first = config_in(configs, d);
        let (Some(cc), None) = (cc, forced_config()) else { return first };
        // A variable-length batch passes no key length: its longest query sequence stands for both.
        let sk = if sk == 0 { sq } else { sk };
        let dp = configs[first].get("D").expect("every forward config names D");
        let bucket = forward_bucket(dp, flags & CAUSAL != 0, sq, sk);
        let tuned = crate::tune::config_in_bucket(cc, "attention", configs, bucket, || first);
        // A table names only configs of its bucket's head dim; anything else is ignored.
        if configs[tuned].get("D") == Some(dp) { tuned } else { first }
    }

    /// The backward's configs for head dim `d`: `(dK/dV kernel, dQ kernel,
    /// whether the dK/dV program makes dQ)` (then the dQ kernel does not run).
    fn backward_configs(self, d: usize) -> (usize, usize, bool) {
        match self {
            Program::Mma => (config_in(attention_bwd_kv_kernel::CONFIGS, d), config_in(attention_bwd_q_kernel::CONFIGS, d), false),
            Program::Wgmma => {
                let kv = config_in(attention_bwd_kv_wgmma_kernel::CONFIGS, d);
                (kv, config_in(attention_bwd_q_wgmma_kernel::CONFIGS, d), makes_dq(kv))
            }
        }
    }
}

/// The forward's launch, fixed or variable length: `sizes` are the
/// kernels' `[batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h]`.
#[allow(clippy::too_many_arguments)]
fn forward_on_gpu<T: Elem>(
    gpu: &Gpu,
    config: Option<usize>,
    [q, k, v]: [&Tensor<T>; 3],
    o: &mut Tensor<T>,
    lse: &mut Tensor<f32>,
    [cu_q, cu_k]: [&Tensor<u32>; 2],
    sizes: [usize; 9],
    scale: f32,
    flags: u32,
) -> Result<()> {
    let [batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h] = sizes;
    let (kernel, cfg) = match config {
        Some(cfg) if attention_fwd_wgmma_kernel::supported(gpu) => (Program::Wgmma, cfg),
        Some(_) => return Err(Error::Invalid("attention: Attention::config names a config of Hopper's forward, which needs an sm_90 GPU".into())),
        None => {
            let kernel = Program::on(gpu, d);
            (kernel, kernel.forward_config(Some(gpu.compute_capability()), d, flags, sq, sk))
        }
    };
    match kernel {
        Program::Mma => attention_fwd_kernel::launch(
            gpu, cfg, q, k, v, o, lse, cu_q, cu_k,
            batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
        ),
        Program::Wgmma => {
            let c = &attention_fwd_wgmma_kernel::CONFIGS[cfg];
            let [dp, bm, bn] = ["D", "BM", "BN"].map(|p| c.get(p).expect("every Hopper forward config names D, BM and BN"));
            let maps = |t: &Tensor<T>, heads: usize, rows: usize| head_maps(gpu, t, heads, d, rows, dp);
            let ([mq, mq1], [mk, mk1], [mv, mv1]) = (maps(q, heads, bm)?, maps(k, kv_heads, bn)?, maps(v, kv_heads, bn)?);
            attention_fwd_wgmma_kernel::launch(
                gpu, cfg, q, k, v, o, lse, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
                mq, mq1, mk, mk1, mv, mv1,
            )
        }
    }
}

/// The tensor maps (device addresses) through which the Hopper kernels'
/// copy engine reads one head of a token-major tensor `t` (`[.., heads,
/// d]`) at a time, `rows` tokens a box: the head's first 64 columns, and
/// the rest of its padded width `dp` (0 when `dp` is 64). Boxes past `d`
/// are zero-filled. A tensor without tokens has no maps (0): no program
/// reads it.
fn head_maps<T: Elem>(gpu: &Gpu, t: &Tensor<T>, heads: usize, d: usize, rows: usize, dp: usize) -> Result<[u64; 2]> {
    let tokens = t.numel() / (heads * d);
    if tokens == 0 {
        return Ok([0, 0]);
    }
    let bytes = core::mem::size_of::<T>();
    let map = |cols: usize| {
        gpu.tensor_map(&TileMap {
            base: t.device_ptr(),
            dims: [d as u64, tokens as u64, heads as u64],
            strides: [(bytes * heads * d) as u64, (bytes * d) as u64],
            boxes: [cols as u32, rows as u32, 1],
            elem_bytes: bytes as u32,
        })
    };
    Ok([map(64)?, if dp > 64 { map(dp - 64)? } else { 0 }])
}

/// [`forward_on_gpu`] in the CPU interpreter, with the program named;
/// `(o, lse)` of `o_len` and `lse_len` values, NaN where nothing was written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_on_cpu<T: Elem>(
    (kernel, config): (Program, Option<usize>),
    [q, k, v]: [&[T]; 3],
    [cu_q, cu_k]: [&[u32]; 2],
    sizes: [usize; 9],
    scale: f32,
    flags: u32,
    [o_len, lse_len]: [usize; 2],
) -> (Vec<T>, Vec<f32>) {
    let [batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h] = sizes;
    let (mut o, mut lse) = (vec![T::from_f32(f32::NAN); o_len], vec![f32::NAN; lse_len]);
    if batch * sq * heads == 0 {
        return (o, lse);
    }
    // A config named is one of Hopper's forward.
    let (kernel, cfg) = match config {
        Some(cfg) => (Program::Wgmma, cfg),
        None => (kernel, kernel.forward_config(None, d, flags, sq, sk)),
    };
    match kernel {
        Program::Mma => attention_fwd_kernel::cpu(
            cfg, q, k, v, &mut o, &mut lse, cu_q, cu_k,
            batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
        ),
        Program::Wgmma => attention_fwd_wgmma_kernel::cpu(
            cfg, q, k, v, &mut o, &mut lse, cu_q, cu_k,
            batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
            // The interpreter copies the window a map would describe.
            0, 0, 0, 0, 0, 0,
        ),
    }
    (o, lse)
}

/// [`attention`] in the CPU interpreter, on row-major slices in the same
/// layouts. Returns `(o, lse)`.
pub fn attention_cpu<T: Elem>(q: &[T], k: &[T], v: &[T], dims: Dims, opt: Attention) -> (Vec<T>, Vec<f32>) {
    attention_cpu_on(Program::Mma, q, k, v, dims, opt)
}

/// [`attention_cpu`] running the program `kernel`.
pub fn attention_cpu_on<T: Elem>(kernel: Program, q: &[T], k: &[T], v: &[T], dims: Dims, opt: Attention) -> (Vec<T>, Vec<f32>) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let Checked { keys, scale, flags, config } = check_opts(&dims, &opt, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.len(), batch * sq * heads * d, "attention_cpu: q holds {} elements, not {dims:?}'s", q.len());
    assert_eq!([k.len(), v.len()], [batch * sk * kv_heads * d; 2], "attention_cpu: k and v do not match {dims:?}");
    let sizes = [batch, sq, keys, heads, kv_heads, d, sq, sk, sq];
    forward_on_cpu((kernel, config), [q, k, v], [&[], &[]], sizes, scale, flags, [q.len(), batch * heads * sq])
}

/// Config `cfg` of Hopper's forward, if it exists and its `D` holds head dim `d`.
fn checked_config(cfg: usize, d: usize) -> std::result::Result<usize, String> {
    let configs = attention_fwd_wgmma_kernel::CONFIGS;
    match configs.get(cfg) {
        Some(c) if c.get("D").unwrap() >= d => Ok(cfg),
        Some(c) => Err(format!("attention: config {} holds head dims up to {}, not {d}", c.name, c.get("D").unwrap())),
        None => Err(format!("attention: no forward config {cfg}; the kernel has {}", configs.len())),
    }
}

/// The sequences of a variable-length batch: their query and key counts,
/// as the cumulative offsets the kernel reads (on the GPU). Build it once
/// per batch layout.
pub struct SeqLens {
    batch: Batch,
    cu_q: Tensor<u32>,
    cu_k: Tensor<u32>,
}

/// A variable-length batch's sizes: sequences, the longest query and key
/// sequences (the grids), and the query and key tokens of the whole batch.
#[derive(Clone, Copy)]
struct Batch {
    seqs: usize,
    max_q: usize,
    max_k: usize,
    tq: usize,
    tk: usize,
}

impl Batch {
    fn of(q_lens: &[usize], k_lens: &[usize]) -> Batch {
        let longest = |lens: &[usize]| lens.iter().copied().max().unwrap_or(0);
        Batch { seqs: q_lens.len(), max_q: longest(q_lens), max_k: longest(k_lens), tq: q_lens.iter().sum(), tk: k_lens.iter().sum() }
    }

    /// The sizes a launch checks and takes (`sk` the key tokens).
    fn dims(&self, heads: usize, kv_heads: usize, d: usize) -> Dims {
        Dims { batch: self.seqs, sq: self.max_q, sk: self.tk, heads, kv_heads, d }
    }
}

/// `[0, n0, n0+n1, …]`, or the error for totals past 32 bits.
fn cumulative(lens: &[usize], what: &str) -> Result<Vec<u32>> {
    let mut cu = vec![0u32];
    let mut total = 0usize;
    for &n in lens {
        total += n;
        cu.push(u32::try_from(total).map_err(|_| Error::Shape(format!("attention_varlen: {total} {what} tokens do not fit 32-bit offsets")))?);
    }
    Ok(cu)
}

impl SeqLens {
    /// Sequence `i` has `q_lens[i]` queries and `k_lens[i]` keys.
    pub fn new(gpu: &Gpu, q_lens: &[usize], k_lens: &[usize]) -> Result<SeqLens> {
        if q_lens.len() != k_lens.len() {
            return Err(Error::Shape(format!("attention_varlen: {} query lengths but {} key lengths", q_lens.len(), k_lens.len())));
        }
        let (cu_q, cu_k) = (cumulative(q_lens, "query")?, cumulative(k_lens, "key")?);
        Ok(SeqLens {
            batch: Batch::of(q_lens, k_lens),
            cu_q: gpu.upload(&cu_q, &[cu_q.len()])?,
            cu_k: gpu.upload(&cu_k, &[cu_k.len()])?,
        })
    }

    /// The sequences as offsets already on the device (FlashAttention's
    /// `cu_seqlens`): `cu_q`, `cu_k` `[seqs + 1]` (sequence `i`'s queries
    /// are tokens `cu_q[i] .. cu_q[i+1]`), `max_q`, `max_k` the longest
    /// sequence's queries and keys (they size the grids) and `totals` the
    /// packed query and key tokens (`q` and `k`'s rows). Nothing is uploaded
    /// or read back, so a CUDA graph can capture the calls that use it.
    ///
    /// The offsets are the caller's word: they start at 0 and do not
    /// decrease, and no sequence is longer than `max_q`, `max_k`. Rows of a
    /// longer one past those are not computed; offsets past `totals` are
    /// cut to them in the kernels, so wrong offsets give wrong rows, never
    /// accesses outside the tensors.
    pub fn from_offsets(cu_q: Tensor<u32>, cu_k: Tensor<u32>, [max_q, max_k]: [usize; 2], [tq, tk]: [usize; 2]) -> Result<SeqLens> {
        let seqs = match (cu_q.shape(), cu_k.shape()) {
            (&[n], &[m]) if n == m && n > 0 => n - 1,
            (a, b) => {
                return Err(Error::Shape(format!(
                    "attention_varlen: cu_seqlens_q and cu_seqlens_k must be [seqs + 1] each (at least [1]); they are {a:?} and {b:?}"
                )))
            }
        };
        if !cu_q.is_contiguous() || !cu_k.is_contiguous() {
            return Err(Error::Shape("attention_varlen: cu_seqlens must be contiguous".into()));
        }
        for (what, n) in [("query", tq), ("key", tk)] {
            if u32::try_from(n).is_err() {
                return Err(Error::Shape(format!("attention_varlen: {n} {what} tokens do not fit 32-bit offsets")));
            }
        }
        Ok(SeqLens { batch: Batch { seqs, max_q, max_k, tq, tk }, cu_q, cu_k })
    }

    /// Query and key tokens of the whole batch.
    pub fn totals(&self) -> (usize, usize) {
        (self.batch.tq, self.batch.tk)
    }
}

/// `(heads, kv_heads, d)` of `q [tokens, heads, d]` and `k [tokens, kv_heads, d]`.
fn varlen_heads<T: Elem>(q: &Tensor<T>, k: &Tensor<T>) -> Result<(usize, usize, usize)> {
    let (&[_, heads, d], &[_, kv_heads, _]) = (q.shape(), k.shape()) else {
        return Err(Error::Shape(format!(
            "attention_varlen: q must be [tokens, heads, d] and k [tokens, kv_heads, d]; they are {:?} and {:?}",
            q.shape(),
            k.shape()
        )));
    };
    Ok((heads, kv_heads, d))
}

/// [`attention`] over sequences of different lengths packed back to back:
/// `q`, `o` `[Σ q_lens, heads, d]`, `k`, `v` `[Σ k_lens, kv_heads, d]`,
/// `lse [heads, Σ q_lens]`. Causal masks are per sequence.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen<T: Elem>(
    gpu: &Gpu,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    seqs: &SeqLens,
    o: &mut Tensor<T>,
    lse: &mut Tensor<f32>,
    opt: Attention,
) -> Result<()> {
    check_dtype::<T>("attention_varlen")?;
    let (tq, tk) = seqs.totals();
    let (heads, kv_heads, d) = varlen_heads(q, k)?;
    expect("q", q.shape(), &[tq, heads, d])?;
    expect("k", k.shape(), &[tk, kv_heads, d])?;
    expect("v", v.shape(), &[tk, kv_heads, d])?;
    expect("o", o.shape(), &[tq, heads, d])?;
    expect("lse", lse.shape(), &[heads, tq])?;
    contiguous([("q", q), ("k", k), ("v", v)])?;
    if !o.is_contiguous() || !lse.is_contiguous() {
        return Err(Error::Shape("attention_varlen: o and lse must be contiguous".into()));
    }
    let dims = seqs.batch.dims(heads, kv_heads, d);
    let Checked { scale, flags, config, .. } = check_opts(&dims, &opt, true)?;
    if dims.batch * dims.sq * heads == 0 {
        return Ok(());
    }
    let sizes = [dims.batch, dims.sq, 0, heads, kv_heads, d, tq, tk, tq];
    forward_on_gpu(gpu, config, [q, k, v], o, lse, [&seqs.cu_q, &seqs.cu_k], sizes, scale, flags)
}

/// [`attention_varlen`] in the CPU interpreter. Returns `(o, lse)`.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen_cpu<T: Elem>(
    q: &[T],
    k: &[T],
    v: &[T],
    q_lens: &[usize],
    k_lens: &[usize],
    shape: [usize; 3],
    opt: Attention,
) -> (Vec<T>, Vec<f32>) {
    attention_varlen_cpu_on(Program::Mma, q, k, v, q_lens, k_lens, shape, opt)
}

/// [`attention_varlen_cpu`] running the program `kernel`.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen_cpu_on<T: Elem>(
    kernel: Program,
    q: &[T],
    k: &[T],
    v: &[T],
    q_lens: &[usize],
    k_lens: &[usize],
    [heads, kv_heads, d]: [usize; 3],
    opt: Attention,
) -> (Vec<T>, Vec<f32>) {
    assert_eq!(q_lens.len(), k_lens.len(), "attention_varlen_cpu: one key length per query length");
    let b = Batch::of(q_lens, k_lens);
    let (dims, (tq, tk)) = (b.dims(heads, kv_heads, d), (b.tq, b.tk));
    let Checked { scale, flags, config, .. } = check_opts(&dims, &opt, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.len(), tq * heads * d, "attention_varlen_cpu: q holds {} elements, not [{tq}, {heads}, {d}]", q.len());
    assert_eq!([k.len(), v.len()], [tk * kv_heads * d; 2], "attention_varlen_cpu: k and v must be [{tk}, {kv_heads}, {d}]");
    let (cu_q, cu_k) = (cumulative(q_lens, "query").unwrap(), cumulative(k_lens, "key").unwrap());
    let sizes = [dims.batch, dims.sq, 0, heads, kv_heads, d, tq, tk, tq];
    forward_on_cpu((kernel, config), [q, k, v], [&cu_q, &cu_k], sizes, scale, flags, [q.len(), heads * tq])
}

/// The gradients of [`attention`]: `dq` (q's shape), `dk`, `dv` (k's shape)
/// from the forward's inputs, its output `o` and log-sum-exp `lse`, and
/// `d_o` (o's shape), with the forward's options. Rows of `dk`, `dv` past
/// [`Attention::keys`] get zeros.
///
/// ```ignore
/// attention(&gpu, &q, &k, &v, &mut o, &mut lse, Attention::causal())?;
/// attention_backward(&gpu, [&q, &k, &v, &o, &d_o], &lse, [&mut dq, &mut dk, &mut dv], Attention::causal())?;
/// ```
pub fn attention_backward<T: Elem>(
    gpu: &Gpu,
    [q, k, v, o, d_o]: [&Tensor<T>; 5],
    lse: &Tensor<f32>,
    [dq, dk, dv]: [&mut Tensor<T>; 3],
    opt: Attention,
) -> Result<()> {
    attention_backward_with(gpu, [q, k, v, o, d_o], lse, [dq, dk, dv], opt, None)
}

/// The scratch [`attention_backward_with`] takes (from
/// [`attention_backward_scratch`]): each query's `rowsum(dO ⊙ O)`, and
/// where the dK/dV programs make dQ too, the f32 sum they add it into.
pub struct AttentionScratch {
    delta: Tensor<f32>,
    dq_sum: Tensor<f32>,
}

/// The scratch [`attention_backward_with`] takes for `q` of `[batch, sq,
/// heads, d]` on this GPU: `delta` `[heads, batch·sq]` f32, and `dq_sum`
/// (q's shape, f32) where the backward's dK/dV program makes dQ.
pub fn attention_backward_scratch(gpu: &Gpu, [batch, sq, heads, d]: [usize; 4]) -> Result<AttentionScratch> {
    let fused = Program::backward_on(gpu, d).backward_configs(d).2;
    AttentionScratch::new(gpu, batch * sq, heads, d, fused)
}

impl AttentionScratch {
    /// For `tokens` queries of `heads` heads of `d`; `fused`: the dK/dV
    /// program makes dQ (else `dq_sum` is one value, never read).
    fn new(gpu: &Gpu, tokens: usize, heads: usize, d: usize, fused: bool) -> Result<Self> {
        Ok(AttentionScratch { delta: gpu.alloc(&[heads, tokens.max(1)])?, dq_sum: gpu.alloc(&[Self::sum_len(tokens, heads, d, fused)])? })
    }

    fn sum_len(tokens: usize, heads: usize, d: usize, fused: bool) -> usize {
        if fused { (tokens * heads * d).max(1) } else { 1 }
    }
}

/// [`attention_backward`] with its scratch given (from
/// [`attention_backward_scratch`]), so that it allocates nothing: a
/// training step made once and replayed as a CUDA graph. `None` allocates it.
pub fn attention_backward_with<T: Elem>(
    gpu: &Gpu,
    [q, k, v, o, d_o]: [&Tensor<T>; 5],
    lse: &Tensor<f32>,
    [dq, dk, dv]: [&mut Tensor<T>; 3],
    opt: Attention,
    scratch: Option<&mut AttentionScratch>,
) -> Result<()> {
    check_dtype::<T>("attention_backward")?;
    let dims = dims_of(q, k, v)?;
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    expect_grads([o, d_o], [&*dq, &*dk, &*dv], q.shape(), k.shape())?;
    expect("lse", lse.shape(), &[batch, heads, sq])?;
    let Checked { keys, scale, flags, .. } = check_opts(&dims, &opt, false)?;
    let none = gpu.alloc::<u32>(&[0])?;
    let sizes = [batch, sq, keys, heads, kv_heads, d, sq, sk, sq];
    backward_on_gpu(gpu, [q, k, v, o, d_o], lse, [dq, dk, dv], [&none, &none], sizes, scale, flags, scratch)
}

/// The shapes and layouts the backward checks beyond the forward's: `o`,
/// `d_o` and `dq` are q's shape, `dk`, `dv` k's; all contiguous.
fn expect_grads<T: Elem>([o, d_o]: [&Tensor<T>; 2], [dq, dk, dv]: [&Tensor<T>; 3], q: &[usize], k: &[usize]) -> Result<()> {
    for (what, t, want) in [("o", o, q), ("d_o", d_o, q), ("dq", dq, q), ("dk", dk, k), ("dv", dv, k)] {
        expect(what, t.shape(), want)?;
        if !t.is_contiguous() {
            return Err(Error::Shape(format!("attention_backward: {what} must be contiguous; its strides are {:?}", t.strides())));
        }
    }
    Ok(())
}

/// The three backward launches, fixed or variable length: `sizes` are the
/// kernels' `[batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h]`.
#[allow(clippy::too_many_arguments)]
fn backward_on_gpu<T: Elem>(
    gpu: &Gpu,
    [q, k, v, o, d_o]: [&Tensor<T>; 5],
    lse: &Tensor<f32>,
    [dq, dk, dv]: [&mut Tensor<T>; 3],
    [cu_q, cu_k]: [&Tensor<u32>; 2],
    sizes: [usize; 9],
    scale: f32,
    flags: u32,
    scratch: Option<&mut AttentionScratch>,
) -> Result<()> {
    let [batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h] = sizes;
    let tokens = query_tokens(batch, q_bs, lse_h, flags & VARLEN != 0);
    let program = Program::backward_on(gpu, d);
    let (kv_cfg, q_cfg, fused) = program.backward_configs(d);
    // The kernel's key grid spans dk's rows: those past the keys used get zeros.
    if batch * key_rows(sk, kv_bs, flags) * kv_heads > 0 {
        let mut made;
        let AttentionScratch { delta, dq_sum } = match scratch {
            Some(t) if t.delta.numel() >= heads * tokens.max(1) && t.dq_sum.numel() >= AttentionScratch::sum_len(tokens, heads, d, fused) => t,
            Some(t) => {
                return Err(Error::Shape(format!(
                    "attention_backward: the scratch holds {} and {} values; {heads}×{tokens} and {} needed (attention_backward_scratch makes it)",
                    t.delta.numel(),
                    t.dq_sum.numel(),
                    AttentionScratch::sum_len(tokens, heads, d, fused)
                )))
            }
            None => {
                made = AttentionScratch::new(gpu, tokens, heads, d, fused)?;
                &mut made
            }
        };
        if tokens * heads > 0 {
            attention_bwd_rows_kernel::launch(gpu, rows_config(d), o, d_o, delta, tokens, heads, d)?;
        }
        if fused {
            gpu.fill_bytes(dq_sum, 0)?;
        }
        // dK/dV and dQ read the same inputs and write apart, so they run
        // concurrently: each launch's last wave leaves SMs to the other.
        // dQ is queued first: at the vision shape that was 352 µs against
        // 360 the other way round and 364 one after the other
        // (bench/RESULTS.md, 2026-11-23,
        // “Head dim 72: dK/dV and dQ on two streams…”).
        let mut kv = || match program {
            Program::Mma => attention_bwd_kv_kernel::launch(
                gpu, kv_cfg, q, k, v, d_o, lse, &delta, dk, dv, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
            ),
            Program::Wgmma => {
                // Maps only for a config that copies by TMA (its copy warpgroup); the others never read them.
                let c = &attention_bwd_kv_wgmma_kernel::CONFIGS[kv_cfg];
                let [dp, bm, bn, copier] = ["D", "BM", "BN", "COPIER"].map(|p| c.get(p).expect("every Hopper dK/dV config names D, BM, BN and COPIER"));
                let maps = |t: &Tensor<T>, heads: usize, rows: usize| if copier == 1 { head_maps(gpu, t, heads, d, rows, dp) } else { Ok([0, 0]) };
                let ([mq, mq1], [mdo, mdo1]) = (maps(q, heads, bm)?, maps(d_o, heads, bm)?);
                let ([mk, mk1], [mv, mv1]) = (maps(k, kv_heads, bn)?, maps(v, kv_heads, bn)?);
                let mdq = if fused { sum_map(gpu, dq_sum, tokens, heads, d)? } else { 0 };
                attention_bwd_kv_wgmma_kernel::launch(
                    gpu, kv_cfg, q, k, v, d_o, lse, &delta, dk, dv, dq_sum, cu_q, cu_k,
                    batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
                    mq, mq1, mdo, mdo1, mk, mk1, mv, mv1, mdq,
                )
            }
        };
        if fused {
            kv()?;
            return if tokens * heads > 0 { attention_bwd_dq_kernel::launch(gpu, 0, dq_sum, dq, tokens * heads * d, scale) } else { Ok(()) };
        }
        let dq_ = || match program {
            _ if batch * sq * heads == 0 => Ok(()),
            Program::Mma => attention_bwd_q_kernel::launch(
                gpu, q_cfg, q, k, v, d_o, lse, &delta, dq, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
            ),
            Program::Wgmma => {
                // Maps only for what a config copies by TMA (K and V, and with
                // a copy warpgroup Q and dO); the others are never read.
                let c = &attention_bwd_q_wgmma_kernel::CONFIGS[q_cfg];
                let [dp, bm, bn, tma, copier] = ["D", "BM", "BN", "TMA", "COPIER"].map(|p| c.get(p).expect("every Hopper dQ config names D, BM, BN, TMA and COPIER"));
                let maps = |t: &Tensor<T>, heads: usize, rows: usize, on: bool| if on { head_maps(gpu, t, heads, d, rows, dp) } else { Ok([0, 0]) };
                let ([mk, mk1], [mv, mv1]) = (maps(k, kv_heads, bn, tma == 1)?, maps(v, kv_heads, bn, tma == 1)?);
                let ([mq, mq1], [mdo, mdo1]) = (maps(q, heads, bm, copier == 1)?, maps(d_o, heads, bm, copier == 1)?);
                attention_bwd_q_wgmma_kernel::launch(
                    gpu, q_cfg, q, k, v, d_o, lse, &delta, dq, cu_q, cu_k,
                    batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
                    mk, mk1, mv, mv1, mq, mq1, mdo, mdo1,
                )
            }
        };
        gpu.concurrently(dq_, kv)?;
    } else if batch * sq * heads > 0 {
        // No keys at all: no query sees one.
        gpu.fill_bytes(dq, 0)?;
    }
    Ok(())
}

/// The copy engine's map of `dq_sum` (f32, `[tokens, heads, d]`) that the
/// dK/dV programs add dQ into: boxes of 64 rows and 32 columns, each
/// multiplying warpgroup's half of a head.
fn sum_map(gpu: &Gpu, dq_sum: &Tensor<f32>, tokens: usize, heads: usize, d: usize) -> Result<u64> {
    gpu.tensor_map(&TileMap {
        base: dq_sum.device_ptr(),
        dims: [d as u64, tokens.max(1) as u64, heads as u64],
        strides: [(4 * heads * d) as u64, (4 * d) as u64],
        boxes: [32, 64, 1],
        elem_bytes: 4,
    })
}

/// The delta kernel's config for head dim `d`: the narrowest whose `BN` holds it.
fn rows_config(d: usize) -> usize {
    crate::pick_config(attention_bwd_rows_kernel::CONFIGS, |c| c.get("BN").unwrap() >= d)
}

/// [`attention_backward`] in the CPU interpreter, on row-major slices in
/// the same layouts. Returns `(dq, dk, dv)`.
#[allow(clippy::type_complexity)]
pub fn attention_backward_cpu<T: Elem>(inputs: [&[T]; 5], lse: &[f32], dims: Dims, opt: Attention) -> (Vec<T>, Vec<T>, Vec<T>) {
    attention_backward_cpu_on(Program::Mma, inputs, lse, dims, opt)
}

/// [`attention_backward_cpu`] running the programs `program`.
#[allow(clippy::type_complexity)]
pub fn attention_backward_cpu_on<T: Elem>(
    program: Program,
    inputs: [&[T]; 5],
    lse: &[f32],
    dims: Dims,
    opt: Attention,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    backward_cpu_checked(program, [None; 2], inputs, lse, dims, opt)
}

/// The CPU backward's argument checks, then [`backward_on_cpu`]; with
/// `configs` naming a dK/dV config ([`attention_bwd_kv_wgmma_kernel`]`::CONFIGS`)
/// or a dQ one ([`attention_bwd_q_wgmma_kernel`]`::CONFIGS`), each one whose
/// `D` holds the head dim, those instead of the defaults: the tests walk
/// every config.
#[allow(clippy::type_complexity)]
pub(super) fn backward_cpu_checked<T: Elem>(
    program: Program,
    configs: [Option<usize>; 2],
    [q, k, v, o, d_o]: [&[T]; 5],
    lse: &[f32],
    dims: Dims,
    opt: Attention,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let Checked { keys, scale, flags, .. } = check_opts(&dims, &opt, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!([q.len(), o.len(), d_o.len()], [batch * sq * heads * d; 3], "attention_backward_cpu: q, o and d_o must be {dims:?}'s [batch, sq, heads, d]");
    assert_eq!([k.len(), v.len()], [batch * sk * kv_heads * d; 2], "attention_backward_cpu: k and v do not match {dims:?}");
    assert_eq!(lse.len(), batch * heads * sq, "attention_backward_cpu: lse must be [batch, heads, sq]");
    let sizes = [batch, sq, keys, heads, kv_heads, d, sq, sk, sq];
    backward_on_cpu(program, configs, [q, k, v, o, d_o], lse, [&[], &[]], sizes, scale, flags)
}

/// [`backward_on_gpu`] in the CPU interpreter, with the programs named;
/// NaN marks a gradient the kernels missed.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn backward_on_cpu<T: Elem>(
    program: Program,
    [kv_config, q_config]: [Option<usize>; 2],
    [q, k, v, o, d_o]: [&[T]; 5],
    lse: &[f32],
    [cu_q, cu_k]: [&[u32]; 2],
    sizes: [usize; 9],
    scale: f32,
    flags: u32,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let [batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h] = sizes;
    let tokens = query_tokens(batch, q_bs, lse_h, flags & VARLEN != 0);
    let (kv_default, q_default, _) = program.backward_configs(d);
    let (kv_cfg, q_cfg) = (kv_config.unwrap_or(kv_default), q_config.unwrap_or(q_default));
    let fused = program == Program::Wgmma && makes_dq(kv_cfg);
    let nan = |n: usize| vec![T::from_f32(f32::NAN); n];
    let (mut dq, mut dk, mut dv) = (nan(q.len()), nan(k.len()), nan(v.len()));
    let mut delta = vec![0.0f32; tokens * heads];
    if tokens * heads > 0 {
        attention_bwd_rows_kernel::cpu(rows_config(d), o, d_o, &mut delta, tokens, heads, d);
    }
    let mut dq_sum = vec![0.0f32; if fused { q.len() } else { 0 }];
    if batch * key_rows(sk, kv_bs, flags) * kv_heads > 0 {
        match program {
            Program::Mma => attention_bwd_kv_kernel::cpu(
                kv_cfg, q, k, v, d_o, lse, &delta, &mut dk, &mut dv, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
            ),
            Program::Wgmma => attention_bwd_kv_wgmma_kernel::cpu(
                kv_cfg, q, k, v, d_o, lse, &delta, &mut dk, &mut dv, &mut dq_sum, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
                // The interpreter copies the window a map would describe.
                0, 0, 0, 0, 0, 0, 0, 0, 0,
            ),
        }
        if fused {
            attention_bwd_dq_kernel::cpu(0, &dq_sum, &mut dq, q.len(), scale);
            return (dq, dk, dv);
        }
    }
    if batch * sq * heads > 0 {
        match program {
            Program::Mma => attention_bwd_q_kernel::cpu(
                q_cfg, q, k, v, d_o, lse, &delta, &mut dq, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
            ),
            Program::Wgmma => attention_bwd_q_wgmma_kernel::cpu(
                q_cfg, q, k, v, d_o, lse, &delta, &mut dq, cu_q, cu_k,
                batch, sq, sk, heads, kv_heads, d, q_bs, kv_bs, lse_h, scale, flags,
                0, 0, 0, 0, 0, 0, 0, 0,
            ),
        }
    }
    (dq, dk, dv)
}

/// [`attention_backward`] for a variable-length batch ([`attention_varlen`]'s
/// layouts: `lse [heads, Σ q_lens]`).
pub fn attention_varlen_backward<T: Elem>(
    gpu: &Gpu,
    [q, k, v, o, d_o]: [&Tensor<T>; 5],
    lse: &Tensor<f32>,
    seqs: &SeqLens,
    [dq, dk, dv]: [&mut Tensor<T>; 3],
    opt: Attention,
) -> Result<()> {
    check_dtype::<T>("attention_varlen_backward")?;
    let (heads, kv_heads, d) = varlen_heads(q, k)?;
    let b = seqs.batch;
    expect("q", q.shape(), &[b.tq, heads, d])?;
    expect("k", k.shape(), &[b.tk, kv_heads, d])?;
    expect("v", v.shape(), k.shape())?;
    expect("lse", lse.shape(), &[heads, b.tq])?;
    contiguous([("q", q), ("k", k), ("v", v)])?;
    expect_grads([o, d_o], [&*dq, &*dk, &*dv], q.shape(), k.shape())?;
    let Checked { scale, flags, .. } = check_opts(&b.dims(heads, kv_heads, d), &opt, true)?;
    let sizes = [b.seqs, b.max_q, b.max_k, heads, kv_heads, d, b.tq, b.tk, b.tq];
    backward_on_gpu(gpu, [q, k, v, o, d_o], lse, [dq, dk, dv], [&seqs.cu_q, &seqs.cu_k], sizes, scale, flags, None)
}

/// [`attention_varlen_backward`] in the CPU interpreter. Returns `(dq, dk, dv)`.
#[allow(clippy::type_complexity)]
pub fn attention_varlen_backward_cpu<T: Elem>(
    inputs: [&[T]; 5],
    lse: &[f32],
    q_lens: &[usize],
    k_lens: &[usize],
    shape: [usize; 3],
    opt: Attention,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    attention_varlen_backward_cpu_on(Program::Mma, inputs, lse, q_lens, k_lens, shape, opt)
}

/// [`attention_varlen_backward_cpu`] running the programs `program`.
#[allow(clippy::type_complexity)]
pub fn attention_varlen_backward_cpu_on<T: Elem>(
    program: Program,
    [q, k, v, o, d_o]: [&[T]; 5],
    lse: &[f32],
    q_lens: &[usize],
    k_lens: &[usize],
    [heads, kv_heads, d]: [usize; 3],
    opt: Attention,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    assert_eq!(q_lens.len(), k_lens.len(), "attention_varlen_backward_cpu: one key length per query length");
    let b = Batch::of(q_lens, k_lens);
    let Checked { scale, flags, .. } = check_opts(&b.dims(heads, kv_heads, d), &opt, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!([q.len(), o.len(), d_o.len()], [b.tq * heads * d; 3], "attention_varlen_backward_cpu: q, o and d_o must be [{}, {heads}, {d}]", b.tq);
    assert_eq!([k.len(), v.len()], [b.tk * kv_heads * d; 2], "attention_varlen_backward_cpu: k and v must be [{}, {kv_heads}, {d}]", b.tk);
    assert_eq!(lse.len(), heads * b.tq, "attention_varlen_backward_cpu: lse must be [heads, tokens]");
    let (cu_q, cu_k) = (cumulative(q_lens, "query").unwrap(), cumulative(k_lens, "key").unwrap());
    let sizes = [b.seqs, b.max_q, b.max_k, heads, kv_heads, d, b.tq, b.tk, b.tq];
    backward_on_cpu(program, [None; 2], [q, k, v, o, d_o], lse, [&cu_q, &cu_k], sizes, scale, flags)
}
