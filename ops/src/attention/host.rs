//! Host API of the attention forward: checks, config choice, launch, and
//! the CPU interpreter's entries.
use super::*;
use crate::gemm::check_dtype;
use rustile_host::{Error, Gpu, Result, Tensor};

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

/// The config for head dim `d`: the narrowest padded width that holds it.
pub fn config_for(d: usize) -> Result<usize> {
    if d == 0 || d % 8 != 0 || d > 128 {
        return Err(Error::Shape(format!(
            "attention: head dim {d} is not supported; it must be a multiple of 8 up to 128 (64, 72, 96 and 128 are benchmarked)"
        )));
    }
    Ok(crate::pick_config(attention_fwd_kernel::CONFIGS, |c| c.get("D").unwrap() >= d))
}

/// What a launch takes once the arguments passed [`check_opts`].
pub(super) struct Checked {
    cfg: usize,
    keys: usize,
    scale: f32,
    flags: u32,
}

/// The checks shared by the GPU and CPU entries.
pub(super) fn check_opts(dims: &Dims, opt: &Attention, varlen: bool) -> Result<Checked> {
    let Dims { sk, heads, kv_heads, d, .. } = *dims;
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::Shape(format!("attention: {heads} query heads cannot share {kv_heads} key/value heads (heads must be a multiple of kv_heads)")));
    }
    let cfg = config_for(d)?;
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
    Ok(Checked { cfg, keys, scale, flags })
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
    let Checked { cfg, keys, scale, flags } = check_opts(&dims, &opt, false)?;
    if batch * sq * heads == 0 {
        return Ok(());
    }
    let none = gpu.alloc::<u32>(&[0])?;
    attention_fwd_kernel::launch(
        gpu, cfg, q, k, v, o, lse, &none, &none,
        batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags,
    )
}

/// [`attention`] in the CPU interpreter, on row-major slices in the same
/// layouts. Returns `(o, lse)`.
pub fn attention_cpu<T: Elem>(q: &[T], k: &[T], v: &[T], dims: Dims, opt: Attention) -> (Vec<T>, Vec<f32>) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let Checked { cfg, keys, scale, flags } = check_opts(&dims, &opt, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.len(), batch * sq * heads * d, "attention_cpu: q holds {} elements, not {dims:?}'s", q.len());
    assert_eq!([k.len(), v.len()], [batch * sk * kv_heads * d; 2], "attention_cpu: k and v do not match {dims:?}");
    // NaN until written: a row the kernel missed shows.
    let (mut o, mut lse) = (vec![T::from_f32(f32::NAN); q.len()], vec![f32::NAN; batch * heads * sq]);
    if q.is_empty() {
        return (o, lse);
    }
    attention_fwd_kernel::cpu(
        cfg, q, k, v, &mut o, &mut lse, &[], &[],
        batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags,
    );
    (o, lse)
}

/// The sequences of a variable-length batch: their query and key counts,
/// as the cumulative offsets the kernel reads (on the GPU). Build it once
/// per batch layout.
pub struct SeqLens {
    batch: Batch,
    cu_q: Tensor<u32>,
    cu_k: Tensor<u32>,
}

/// A variable-length batch's sizes: sequences, the longest query sequence
/// (the grid), and the query and key tokens of the whole batch.
#[derive(Clone, Copy)]
struct Batch {
    seqs: usize,
    max_q: usize,
    tq: usize,
    tk: usize,
}

impl Batch {
    fn of(q_lens: &[usize], k_lens: &[usize]) -> Batch {
        let max_q = q_lens.iter().copied().max().unwrap_or(0);
        Batch { seqs: q_lens.len(), max_q, tq: q_lens.iter().sum(), tk: k_lens.iter().sum() }
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

    /// Query and key tokens of the whole batch.
    pub fn totals(&self) -> (usize, usize) {
        (self.batch.tq, self.batch.tk)
    }
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
    let (&[_, heads, d], &[_, kv_heads, _]) = (q.shape(), k.shape()) else {
        return Err(Error::Shape(format!(
            "attention_varlen: q must be [tokens, heads, d] and k [tokens, kv_heads, d]; they are {:?} and {:?}",
            q.shape(),
            k.shape()
        )));
    };
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
    let Checked { cfg, scale, flags, .. } = check_opts(&dims, &opt, true)?;
    if dims.batch * dims.sq * heads == 0 {
        return Ok(());
    }
    attention_fwd_kernel::launch(
        gpu, cfg, q, k, v, o, lse, &seqs.cu_q, &seqs.cu_k,
        dims.batch, dims.sq, 0, heads, kv_heads, d, 0, 0, tq, scale, flags,
    )
}

/// [`attention_varlen`] in the CPU interpreter. Returns `(o, lse)`.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen_cpu<T: Elem>(
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
    let Checked { cfg, scale, flags, .. } = check_opts(&dims, &opt, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.len(), tq * heads * d, "attention_varlen_cpu: q holds {} elements, not [{tq}, {heads}, {d}]", q.len());
    assert_eq!([k.len(), v.len()], [tk * kv_heads * d; 2], "attention_varlen_cpu: k and v must be [{tk}, {kv_heads}, {d}]");
    let (mut o, mut lse) = (vec![T::from_f32(f32::NAN); q.len()], vec![f32::NAN; heads * tq]);
    if dims.batch * dims.sq == 0 {
        return (o, lse);
    }
    let (cu_q, cu_k) = (cumulative(q_lens, "query").unwrap(), cumulative(k_lens, "key").unwrap());
    attention_fwd_kernel::cpu(
        cfg, q, k, v, &mut o, &mut lse, &cu_q, &cu_k,
        dims.batch, dims.sq, 0, heads, kv_heads, d, 0, 0, tq, scale, flags,
    );
    (o, lse)
}

/// The gradients of [`attention`]: `dq` (q's shape), `dk`, `dv` (k's shape)
/// from the forward's inputs, its output `o` and log-sum-exp `lse`, and
/// `d_o` (o's shape); the same options as the forward. With
/// [`Attention::keys`], the rows of `dk`, `dv` past the keys used are left
/// as they were. Fixed-length batches; `scale` as the forward's.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<T: Elem>(
    gpu: &Gpu,
    [q, k, v, o, d_o]: [&Tensor<T>; 5],
    lse: &Tensor<f32>,
    [dq, dk, dv]: [&mut Tensor<T>; 3],
    opt: Attention,
) -> Result<()> {
    check_dtype::<T>("attention_backward")?;
    let dims = dims_of(q, k, v)?;
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    contiguous([("q", q), ("k", k), ("v", v)])?;
    contiguous([("o", o), ("d_o", d_o), ("dq", &*dq)])?;
    contiguous([("dk", &*dk), ("dv", &*dv), ("d_o", d_o)])?;
    for (what, t) in [("o", o.shape()), ("d_o", d_o.shape()), ("dq", dq.shape())] {
        expect(what, t, q.shape())?;
    }
    expect("dk", dk.shape(), k.shape())?;
    expect("dv", dv.shape(), k.shape())?;
    expect("lse", lse.shape(), &[batch, heads, sq])?;
    let (keys, scale, flags) = check_opts(&dims, &opt, false)?;
    if batch * sq * heads == 0 || keys == 0 {
        return Ok(());
    }
    let cfg = config_for(d)?;
    let none = gpu.alloc::<u32>(&[0])?;
    let mut delta = gpu.alloc::<f32>(&[batch * sq, heads])?;
    attention_bwd_rows_kernel::launch(gpu, 0, o, d_o, &mut delta, batch * sq * heads, d)?;
    attention_bwd_kv_kernel::launch(
        gpu, cfg, q, k, v, d_o, lse, &delta, dk, dv, &none, &none,
        batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags,
    )?;
    attention_bwd_q_kernel::launch(
        gpu, cfg, q, k, v, d_o, lse, &delta, dq, &none, &none,
        batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags,
    )
}

/// [`attention_backward`] in the CPU interpreter, on row-major slices in
/// the same layouts. Returns `(dq, dk, dv)`; `dk`, `dv` rows of keys past
/// [`Attention::keys`] are zero.
#[allow(clippy::type_complexity)]
pub fn attention_backward_cpu<T: Elem>([q, k, v, o, d_o]: [&[T]; 5], lse: &[f32], dims: Dims, opt: Attention) -> (Vec<T>, Vec<T>, Vec<T>) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (keys, scale, flags) = check_opts(&dims, &opt, false).unwrap_or_else(|e| panic!("{e}"));
    let cfg = config_for(d).unwrap_or_else(|e| panic!("{e}"));
    let mut delta = vec![0.0f32; batch * sq * heads];
    attention_bwd_rows_kernel::cpu(0, o, d_o, &mut delta, batch * sq * heads, d);
    let (mut dq, mut dk, mut dv) = (vec![T::from_f32(f32::NAN); q.len()], vec![T::default(); k.len()], vec![T::default(); v.len()]);
    attention_bwd_kv_kernel::cpu(cfg, q, k, v, d_o, lse, &delta, &mut dk, &mut dv, &[], &[], batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags);
    attention_bwd_q_kernel::cpu(cfg, q, k, v, d_o, lse, &delta, &mut dq, &[], &[], batch, sq, keys, heads, kv_heads, d, sq, sk, sq, scale, flags);
    (dq, dk, dv)
}
