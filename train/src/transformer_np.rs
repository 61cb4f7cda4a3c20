//! The Transformer Neural Process for 1-D regression, forward, backward and
//! AdamW, on Rustile kernels. One file, read top to bottom: the sizes, the
//! parameters, the buffers, then each layer's forward and backward side by
//! side, then the step.
//!
//! The model: tokens `[x, y, 0]` (context) and `[x, 0, 1]` (targets) are
//! embedded by one linear map; `L` pre-norm layers
//! `h += Wo·attn(LN(h))`, `h += W2·silu(W1·LN(h))` in which every token
//! attends to the context tokens only; a final LayerNorm; on the targets,
//! `K` head MLPs `d → ff → 3` giving a Gaussian mixture per target, whose
//! negative log-likelihood is the loss. No biases, no dropout, no positions.
//! bf16 activations and weights, f32 accumulation, f32 master weights.
//!
//! Where the work goes:
//! - Keys and values are computed for the context rows only (a batched
//!   GEMM over each sequence's first `M` rows): a target is never attended
//!   to, so its key and value would be waste (PyTorch's sliced version
//!   computes them).
//! - Every pre-norm block's input gradient is one write: the LayerNorm
//!   backward adds the residual's gradient (`norm_backward`'s `dres`).
//! - Every product of the backward runs in the layout Hopper's TMA GEMM
//!   takes, `A·Bᵀ`: an input gradient `dy·W` on a transposed copy of `W`
//!   (made per layer as its backward starts), and the SiLU's backward is
//!   that GEMM's epilogue (`Epilogue::silu_grad`). A weight gradient
//!   `dyᵀ·x` (the `mma.sync` kernel's layout) is split along the tokens
//!   (`gemm_split_k`): its `d×d` output alone is a few dozen blocks.
//! - Every hidden width (the MLPs' and the heads') is padded to a
//!   multiple of 8 (1365 → 1368) with weights that are zero and stay zero
//!   (their gradients are exactly zero), so every row is 16-byte aligned
//!   (the copy engine's rule; a 1365-wide row took the edge path in every
//!   chunk) and the first head layer is one GEMM over all heads.
//! - The heads' second-layer weight gradient is one split-K product over
//!   every pair of heads (`doutᵀ·hid`), whose diagonal blocks are copied
//!   out: per head, a product 3 rows wide left each block streaming every
//!   target row alone.
//! - A step allocates nothing: every buffer is made in [`TransformerNp::new`].
//! - With `checkpoint`, a layer keeps only its input; the backward
//!   recomputes the rest (all but the layer's last GEMM, whose output is
//!   the next layer's saved input) into one shared set of buffers.
use rustile::bf16;
use rustile_host::{Error, Gpu, Graph, Result, Tensor};
use rustile_ops::adamw::AdamW;
use rustile_ops::attention::{attention, attention_backward_scratch, AttentionScratch, attention_backward_with, attention_fp8, attention_fwd_fp8_kernel, quantize_heads, Attention, Fp8Layout};
use rustile_ops::gemm::{gemm, gemm_split_k, launch_plan, split_k_parts, Epilogue, Plan, Transpose};
use rustile_ops::gmm_loss::{gmm_nll, gmm_nll_backward, gmm_nll_scratch};
use rustile_ops::norm::{layer_norm, norm_backward, norm_backward_scratch, NormGrads, Saved};
use rustile_ops::transpose::transpose;
use rustile_ops::vector::silu;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::data::{Batch, TOKEN_WIDTH};
use crate::params::{Declared, Params};

const EPS: f32 = 1e-5;

// ---- sizes -----------------------------------------------------------------------------

/// The model's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    pub d_ff: usize,
    /// Mixture components (head MLPs).
    pub components: usize,
}

impl Config {
    /// The TransformerNP: 12 layers, d 512, 8 heads of 64, d_ff 1365, 10 components.
    pub const TNP: Config = Config { layers: 12, d_model: 512, heads: 8, d_ff: 1365, components: 10 };
    /// A small model for the CPU interpreter: 2 layers, d 64, 2 heads of 32.
    pub const TINY: Config = Config { layers: 2, d_model: 64, heads: 2, d_ff: 85, components: 4 };

    fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }
    /// The head MLPs' hidden width, padded to 8.
    fn ff_padded(&self) -> usize {
        self.d_ff.next_multiple_of(8)
    }
}

/// One batch's shape: `batch` functions of `context` + `targets` points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub context: usize,
    pub targets: usize,
}

impl Shape {
    pub fn tokens(&self) -> usize {
        self.batch * (self.context + self.targets)
    }
    fn seq(&self) -> usize {
        self.context + self.targets
    }
}

// ---- buffers ---------------------------------------------------------------------------

/// One layer's parameters (indices into [`Params`]).
struct LayerParams {
    ln1: usize,
    wq: usize,
    wk: usize,
    wv: usize,
    wo: usize,
    ln2: usize,
    w1: usize,
    w2: usize,
}

/// What a layer's forward saves for its backward (with checkpointing, the
/// one set every layer's recomputation writes).
struct Acts {
    mean1: Tensor<f32>,
    rstd1: Tensor<f32>,
    /// LN1's output `[T, d]`, and its context rows gathered `[B·M, d]`
    /// (written by the backward, for the key and value weight gradients).
    xn1: Tensor<bf16>,
    xn1_ctx: Tensor<bf16>,
    /// `[T, d]` (as `[B, S, H, dh]` for attention); keys and values `[B·M, d]`.
    q: Tensor<bf16>,
    k: Tensor<bf16>,
    v: Tensor<bf16>,
    o: Tensor<bf16>,
    lse: Tensor<f32>,
    /// The residual stream after attention.
    h_mid: Tensor<bf16>,
    mean2: Tensor<f32>,
    rstd2: Tensor<f32>,
    xn2: Tensor<bf16>,
    /// The MLP's pre-activation and activation `[T, ffp]`.
    a: Tensor<bf16>,
    u: Tensor<bf16>,
}

/// Gradients that flow through the layers (one set, reused by every layer).
struct Grads {
    /// The residual stream's gradient, and after a layer's MLP.
    dh: Tensor<bf16>,
    dh_mid: Tensor<bf16>,
    dxn: Tensor<bf16>,
    da: Tensor<bf16>,
    d_o: Tensor<bf16>,
    dq: Tensor<bf16>,
    dk: Tensor<bf16>,
    dv: Tensor<bf16>,
    /// The head's: mixture outputs, hidden activations, final norm's output and input.
    dout: Tensor<bf16>,
    dhid: Tensor<bf16>,
    dxf: Tensor<bf16>,
    dh_tgt: Tensor<bf16>,
}

/// The model, its optimizer and every buffer a step uses.
pub struct TransformerNp {
    pub cfg: Config,
    pub shape: Shape,
    pub checkpoint: bool,
    pub params: Params,
    embed: usize,
    layers: Vec<LayerParams>,
    lnf: usize,
    head1: usize,
    head2: usize,
    /// This step's inputs: tokens `[T, 8]` and target values `[B·N]`.
    tokens: Tensor<bf16>,
    y: Tensor<f32>,
    /// The residual stream entering each layer, and leaving the last: `L+1` of `[T, d]`.
    h: Vec<Tensor<bf16>>,
    acts: Vec<Acts>,
    /// Transposed copies of the weights, made by the backward: each
    /// layer's `[wq, wk, wv, wo, w1, w2]`, the heads' two layers.
    wt: Vec<[Tensor<bf16>; 6]>,
    head1t: Tensor<bf16>,
    head2t: Tensor<bf16>,
    /// The parts of a split weight gradient.
    wgrad_scratch: Tensor<f32>,
    /// The mixture outputs' gradient in rows padded to 16 bytes, `[B·N,
    /// pad8(K·3)]` (the pad columns zero), and `doutᵀ·hid` over every pair
    /// of heads, `[pad8(K·3), K·ffp]`: its diagonal blocks are the heads'
    /// second-layer gradients.
    dout_padded: Tensor<bf16>,
    dhead2_pairs: Tensor<f32>,
    /// The head: target rows `[B·N, d]`, their final norm, hidden layer
    /// before and after SiLU `[B·N, K·ffp]`, mixture outputs `[B·N, K, 3]`.
    h_tgt: Tensor<bf16>,
    meanf: Tensor<f32>,
    rstdf: Tensor<f32>,
    xf: Tensor<bf16>,
    hid_pre: Tensor<bf16>,
    hid: Tensor<bf16>,
    out: Tensor<bf16>,
    pub loss: Tensor<f32>,
    g: Grads,
    norm_scratch: Tensor<f32>,
    attn_scratch: AttentionScratch,
    head_norm_scratch: Tensor<f32>,
    nll_scratch: Tensor<f32>,
    /// Attention on e4m3 Q, K, V in the forward ([`TransformerNp::set_fp8_attention`]).
    fp8_attention: bool,
}

/// PyTorch `nn.Linear`'s initialization (uniform in ±1/√fan_in) of an
/// `[out, in]` weight; rows from `rows_used` on and columns from
/// `cols_used` on are zeros (padding).
fn linear_init(rng: &mut StdRng, [out, inp]: [usize; 2], fan_in: usize, [rows_used, cols_used]: [usize; 2]) -> Vec<f32> {
    let bound = 1.0 / (fan_in as f32).sqrt();
    (0..out * inp).map(|i| if i / inp < rows_used && i % inp < cols_used { rng.gen_range(-bound..bound) } else { 0.0 }).collect()
}

impl TransformerNp {
    /// The model with parameters drawn from `seed`, and every buffer for
    /// batches of `shape`, on `gpu`.
    pub fn new(gpu: &Gpu, cfg: Config, shape: Shape, checkpoint: bool, opt: AdamW, seed: u64) -> Result<TransformerNp> {
        let Config { layers, d_model: d, heads, d_ff: ff, components: k } = cfg;
        let ffp = cfg.ff_padded();
        // The mixture outputs' gradient, K·3 values a target, in 16-byte rows.
        let outs_padded = (k * 3).next_multiple_of(8);
        if d % heads != 0 {
            return Err(Error::Shape(format!("d_model {d} is not a multiple of the {heads} heads")));
        }
        if shape.batch == 0 || shape.context == 0 || shape.targets == 0 {
            return Err(Error::Shape(format!("a batch needs functions, context points and targets: {shape:?}")));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut decl = Declared::default();
        // The embedding reads 3 of a token's 8 inputs; the others are zeros.
        let embed = decl.add("embed.w", &[d, TOKEN_WIDTH], true, linear_init(&mut rng, [d, TOKEN_WIDTH], 3, [d, 3]));
        let mut lp = Vec::new();
        for l in 0..layers {
            let mut lin = |name: &str, out: usize, inp: usize| decl.add(format!("layers.{l}.{name}"), &[out, inp], true, linear_init(&mut rng, [out, inp], inp, [out, inp]));
            let (wq, wk, wv, wo) = (lin("wq", d, d), lin("wk", d, d), lin("wv", d, d), lin("wo", d, d));
            // Hidden units ff .. ffp are padding: zero rows of W1, zero columns of W2.
            let mut padded = |name: &str, shape: [usize; 2], fan_in: usize, used: [usize; 2]| decl.add(format!("layers.{l}.{name}"), &shape, true, linear_init(&mut rng, shape, fan_in, used));
            let (w1, w2) = (padded("w1", [ffp, d], d, [ff, d]), padded("w2", [d, ffp], ff, [d, ff]));
            let ln1 = decl.add(format!("layers.{l}.ln1.w"), &[d], false, vec![1.0; d]);
            let ln2 = decl.add(format!("layers.{l}.ln2.w"), &[d], false, vec![1.0; d]);
            lp.push(LayerParams { ln1, wq, wk, wv, wo, ln2, w1, w2 });
        }
        let lnf = decl.add("lnf.w", &[d], false, vec![1.0; d]);
        // Head g's hidden units are rows g·ffp .. g·ffp + ff of one [K·ffp, d] weight.
        let head1_init: Vec<f32> = (0..k).flat_map(|_| linear_init(&mut rng, [ffp, d], d, [ff, d])).collect();
        let head1 = decl.add("head.w1", &[k * ffp, d], true, head1_init);
        let head2_init: Vec<f32> = (0..k).flat_map(|_| linear_init(&mut rng, [3, ffp], ff, [3, ff])).collect();
        let head2 = decl.add("head.w2", &[k, 3, ffp], true, head2_init);
        let params = Params::new(gpu, decl, opt)?;

        let (t, c, r) = (shape.tokens(), shape.batch * shape.context, shape.batch * shape.targets);
        let bf = |s: &[usize]| gpu.alloc::<bf16>(s);
        let f32s = |s: &[usize]| gpu.alloc::<f32>(s);
        let zeroed = |s: &[usize]| -> Result<Tensor<bf16>> {
            let mut z = gpu.alloc::<bf16>(s)?;
            gpu.fill_bytes(&mut z, 0)?;
            Ok(z)
        };
        let acts_set = || -> Result<Acts> {
            Ok(Acts {
                mean1: f32s(&[t])?,
                rstd1: f32s(&[t])?,
                xn1: bf(&[t, d])?,
                xn1_ctx: bf(&[c, d])?,
                q: bf(&[t, d])?,
                k: bf(&[c, d])?,
                v: bf(&[c, d])?,
                o: bf(&[t, d])?,
                lse: f32s(&[shape.batch, heads, shape.seq()])?,
                h_mid: bf(&[t, d])?,
                mean2: f32s(&[t])?,
                rstd2: f32s(&[t])?,
                xn2: bf(&[t, d])?,
                a: bf(&[t, ffp])?,
                u: bf(&[t, ffp])?,
            })
        };
        let acts = (0..if checkpoint { 1 } else { layers }).map(|_| acts_set()).collect::<Result<Vec<_>>>()?;
        let g = Grads {
            dh: bf(&[t, d])?,
            dh_mid: bf(&[t, d])?,
            dxn: bf(&[t, d])?,
            da: bf(&[t, ffp])?,
            d_o: bf(&[t, d])?,
            dq: bf(&[t, d])?,
            dk: bf(&[c, d])?,
            dv: bf(&[c, d])?,
            dout: bf(&[r, k, 3])?,
            dhid: bf(&[r, k * ffp])?,
            dxf: bf(&[r, d])?,
            dh_tgt: bf(&[r, d])?,
        };
        Ok(TransformerNp {
            cfg,
            shape,
            checkpoint,
            params,
            embed,
            layers: lp,
            lnf,
            head1,
            head2,
            tokens: bf(&[t, TOKEN_WIDTH])?,
            y: f32s(&[r])?,
            h: (0..=layers).map(|_| bf(&[t, d])).collect::<Result<_>>()?,
            acts,
            wt: (0..layers).map(|_| Ok([bf(&[d, d])?, bf(&[d, d])?, bf(&[d, d])?, bf(&[d, d])?, bf(&[d, ffp])?, bf(&[ffp, d])?])).collect::<Result<_>>()?,
            head1t: bf(&[d, k * ffp])?,
            head2t: bf(&[k, ffp, 3])?,
            wgrad_scratch: {
                // The largest of the split weight gradients' scratch.
                let sizes = [[d, d, t], [d, d, c], [ffp, d, t], [d, ffp, t], [k * ffp, d, r], [outs_padded, k * ffp, r], [d, TOKEN_WIDTH, t]];
                let most = sizes.iter().map(|&[m, n, kk]| split_k_parts(gpu, m, n, kk) * m * n).max().unwrap();
                f32s(&[most])?
            },
            dout_padded: zeroed(&[r, outs_padded])?,
            dhead2_pairs: f32s(&[outs_padded, k * ffp])?,
            h_tgt: bf(&[r, d])?,
            meanf: f32s(&[r])?,
            rstdf: f32s(&[r])?,
            xf: bf(&[r, d])?,
            // The pad columns are computed as zeros every step; start them finite.
            hid_pre: zeroed(&[r, k * ffp])?,
            hid: zeroed(&[r, k * ffp])?,
            out: bf(&[r, k, 3])?,
            loss: f32s(&[1])?,
            g,
            norm_scratch: norm_backward_scratch(gpu, t, d)?,
            attn_scratch: attention_backward_scratch(gpu, [shape.batch, shape.seq(), heads, cfg.head_dim()])?,
            head_norm_scratch: norm_backward_scratch(gpu, r, d)?,
            nll_scratch: gmm_nll_scratch(gpu, r)?,
            fp8_attention: false,
        })
    }

    /// Runs the forward's attention on e4m3 Q, K and V (one scale per 128
    /// tokens of a head, `attention_fp8`), for inference: Hopper only, head
    /// dims 64 and 128. [`TransformerNp::backward`] refuses to follow such
    /// a forward (it differentiates the bf16 attention).
    pub fn set_fp8_attention(&mut self, gpu: &Gpu, on: bool) -> Result<()> {
        if on && !attention_fwd_fp8_kernel::supported(gpu) {
            return Err(Error::Invalid(format!("FP8 attention needs Hopper (sm_90); {} is not", gpu.name())));
        }
        if on && ![64, 128].contains(&self.cfg.head_dim()) {
            return Err(Error::Invalid(format!("FP8 attention takes head dims 64 and 128, not {}", self.cfg.head_dim())));
        }
        self.fp8_attention = on;
        Ok(())
    }

    /// The mixture's parameters of the last forward, `[B·N, components, 3]` (waits for them).
    pub fn outputs(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        Ok(gpu.download(&self.out)?.iter().map(|x| x.to_f32()).collect())
    }

    /// Copies a batch into the input buffers (before a step, or a graph's replay).
    pub fn load_batch(&mut self, gpu: &Gpu, b: &Batch) -> Result<()> {
        if b.tokens.len() != self.tokens.numel() || b.y.len() != self.y.numel() {
            return Err(Error::Shape(format!("the batch does not have the shape the model was made for ({:?})", self.shape)));
        }
        gpu.write(&mut self.tokens, &b.tokens.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())?;
        gpu.write(&mut self.y, &b.y)
    }

    /// Bytes of device memory the model holds (parameters, optimizer,
    /// activations, gradients, scratch).
    pub fn buffer_bytes(&self) -> usize {
        let a = |x: &Acts| {
            [x.xn1.bytes(), x.xn1_ctx.bytes(), x.q.bytes(), x.k.bytes(), x.v.bytes(), x.o.bytes(), x.h_mid.bytes(), x.xn2.bytes(), x.a.bytes(), x.u.bytes()].iter().sum::<usize>()
                + [x.mean1.bytes(), x.rstd1.bytes(), x.lse.bytes(), x.mean2.bytes(), x.rstd2.bytes()].iter().sum::<usize>()
        };
        let g = &self.g;
        let grads = [g.dh.bytes(), g.dh_mid.bytes(), g.dxn.bytes(), g.da.bytes(), g.d_o.bytes(), g.dq.bytes(), g.dk.bytes(), g.dv.bytes(), g.dout.bytes(), g.dhid.bytes(), g.dxf.bytes(), g.dh_tgt.bytes()];
        self.params.count() * (4 * 4 + 2)
            + self.acts.iter().map(a).sum::<usize>()
            + self.h.iter().map(|t| t.bytes()).sum::<usize>()
            + grads.iter().sum::<usize>()
            + self.wt.iter().flatten().map(|t| t.bytes()).sum::<usize>()
            + self.wgrad_scratch.bytes()
            + self.dout_padded.bytes()
            + self.dhead2_pairs.bytes()
            + [self.head1t.bytes(), self.head2t.bytes(), self.h_tgt.bytes(), self.xf.bytes(), self.hid_pre.bytes(), self.hid.bytes(), self.out.bytes()].iter().sum::<usize>()
    }

    /// Floating-point operations of one step's matrix products: `(all,
    /// attention's)`. A product's backward is twice its forward (both
    /// operands' gradients); attention's is 2.5 times (flash attention
    /// recomputes the scores), so a step is 3 (3.5) forward passes.
    pub fn flops(&self) -> (f64, f64) {
        let Config { layers, d_model: d, heads: _, d_ff: ff, components: k } = self.cfg;
        let Shape { batch, context: m, targets: n } = self.shape;
        let (t, c, r) = ((batch * (m + n)) as f64, (batch * m) as f64, (batch * n) as f64);
        let (d, ff, ffp, k) = (d as f64, ff as f64, self.cfg.ff_padded() as f64, k as f64);
        let _ = ff; // the padding's products are zeros, but they are computed
        let per_layer = 2.0 * t * (2.0 * d * d + 2.0 * d * ffp) + 2.0 * c * 2.0 * d * d;
        let head = 2.0 * r * (d * k * ffp + k * ffp * 3.0) + 2.0 * t * d * TOKEN_WIDTH as f64;
        let attention = layers as f64 * 4.0 * (batch * (m + n) * m * self.cfg.d_model) as f64;
        (3.0 * (layers as f64 * per_layer + head) + 3.5 * attention, 3.5 * attention)
    }

    fn acts_of(&self, l: usize) -> usize {
        if self.checkpoint { 0 } else { l }
    }

    // ---- the plans of the context rows ---------------------------------------------------

    /// `C[b] = A[b, :M]·Wᵀ` for every sequence b: the keys or values of the
    /// context rows, from the `[B, S, d]` rows of A into `[B·M, d]`.
    fn context_plan(&self) -> Plan {
        let (d, s, m) = (self.cfg.d_model, self.shape.seq(), self.shape.context);
        Plan { m, n: d, k: d, batch: self.shape.batch, ld: [d, d, d], stride: [s * d, 0, m * d, 0], ta: false, tb: true }
    }

    /// The mixture layer of the heads, per head g: `out[:, g] = hid[:, g]·W2[g]ᵀ`.
    fn head2_plan(&self) -> Plan {
        let (k, ffp, r) = (self.cfg.components, self.cfg.ff_padded(), self.shape.batch * self.shape.targets);
        Plan { m: r, n: 3, k: ffp, batch: k, ld: [k * ffp, ffp, k * 3], stride: [ffp, 3 * ffp, 3, 0], ta: false, tb: true }
    }

    // ---- forward ---------------------------------------------------------------------------

    /// Layer `l`: `h[l+1] = h_mid + W2·silu(W1·LN2(h_mid))` with
    /// `h_mid = h[l] + Wo·attn(LN1(h[l]))`, saving what the backward reads.
    /// `recompute`: the checkpointed backward's pass, which stops before
    /// the last GEMM (its output, `h[l+1]`, is already saved).
    fn layer_forward(&mut self, gpu: &Gpu, l: usize, recompute: bool) -> Result<()> {
        let (p, lp) = (&self.params, &self.layers[l]);
        let Shape { batch, context, .. } = self.shape;
        let (heads, dh, s) = (self.cfg.heads, self.cfg.head_dim(), self.shape.seq());
        let (context_plan, acts) = (self.context_plan(), self.acts_of(l));
        let x = &self.h[l];
        let a = &mut self.acts[acts];
        layer_norm(gpu, x, &p.get(lp.ln1).w, None, EPS, &mut a.xn1, &mut a.mean1, &mut a.rstd1)?;
        gemm(gpu, &a.xn1, p.get(lp.wq).w.t(), &mut a.q, &Epilogue::new())?;
        launch_plan(gpu, None, &context_plan, &a.xn1, &p.get(lp.wk).w, &mut a.k, &Epilogue::new())?;
        launch_plan(gpu, None, &context_plan, &a.xn1, &p.get(lp.wv).w, &mut a.v, &Epilogue::new())?;
        let q4 = a.q.view(0, &[batch, s, heads, dh])?;
        let (k4, v4) = (a.k.view(0, &[batch, context, heads, dh])?, a.v.view(0, &[batch, context, heads, dh])?);
        let mut o4 = a.o.view(0, &[batch, s, heads, dh])?;
        if self.fp8_attention {
            let e4m3 = |x: &Tensor<bf16>, layout| quantize_heads(gpu, x, None, layout);
            let (q8, k8, v8) = (e4m3(&q4, Fp8Layout::Tokens)?, e4m3(&k4, Fp8Layout::Tokens)?, e4m3(&v4, Fp8Layout::ValuesT)?);
            attention_fp8(gpu, &q8, &k8, &v8, &mut o4, &mut a.lse, Attention::default())?;
        } else {
            attention(gpu, &q4, &k4, &v4, &mut o4, &mut a.lse, Attention::default())?;
        }
        gemm(gpu, &a.o, p.get(lp.wo).w.t(), &mut a.h_mid, &Epilogue::new().residual(x))?;
        layer_norm(gpu, &a.h_mid, &p.get(lp.ln2).w, None, EPS, &mut a.xn2, &mut a.mean2, &mut a.rstd2)?;
        gemm(gpu, &a.xn2, p.get(lp.w1).w.t(), &mut a.a, &Epilogue::new())?;
        silu(gpu, &a.a, &mut a.u)?;
        if !recompute {
            let mut out = self.h[l + 1].view(0, self.h[l + 1].shape())?;
            gemm(gpu, &a.u, p.get(lp.w2).w.t(), &mut out, &Epilogue::new().residual(&a.h_mid))?;
        }
        Ok(())
    }

    /// The whole forward to the loss (`self.loss`, on the device).
    pub fn forward(&mut self, gpu: &Gpu) -> Result<()> {
        let Shape { batch, context: m, targets: n } = self.shape;
        let (d, s, layers) = (self.cfg.d_model, self.shape.seq(), self.cfg.layers);
        gemm(gpu, &self.tokens, self.params.get(self.embed).w.t(), &mut self.h[0], &Epilogue::new())?;
        for l in 0..layers {
            self.layer_forward(gpu, l, false)?;
        }
        // The targets' rows of each sequence are one run of N·d values.
        let last = self.h[layers].view(m * d, &[self.h[layers].numel() - m * d])?;
        gpu.copy_rows(&last, &mut self.h_tgt, [batch, n * d], [s * d, n * d])?;
        let p = &self.params;
        layer_norm(gpu, &self.h_tgt, &p.get(self.lnf).w, None, EPS, &mut self.xf, &mut self.meanf, &mut self.rstdf)?;
        gemm(gpu, &self.xf, p.get(self.head1).w.t(), &mut self.hid_pre, &Epilogue::new())?;
        silu(gpu, &self.hid_pre, &mut self.hid)?;
        let mut out = self.out.view(0, &[batch * n, self.cfg.components * 3])?;
        launch_plan(gpu, None, &self.head2_plan(), &self.hid, &p.get(self.head2).w, &mut out, &Epilogue::new())?;
        gmm_nll(gpu, &self.out, &self.y, &mut self.loss, &mut self.nll_scratch)
    }

    // ---- backward --------------------------------------------------------------------------

    /// Layer `l`'s backward: from `g.dh` (the gradient of `h[l+1]`) to the
    /// gradient of `h[l]`, written back into `g.dh`, and every weight's.
    fn layer_backward(&mut self, gpu: &Gpu, l: usize) -> Result<()> {
        if self.checkpoint {
            self.layer_forward(gpu, l, true)?;
        }
        let (p, lp, g) = (&self.params, &self.layers[l], &mut self.g);
        let Shape { batch, context: m, .. } = self.shape;
        let (heads, dh_, s, d) = (self.cfg.heads, self.cfg.head_dim(), self.shape.seq(), self.cfg.d_model);
        let a = &mut self.acts[if self.checkpoint { 0 } else { l }];
        let x = &self.h[l];
        let w = |i: usize| &p.get(i).w;
        let dw = |i: usize| p.get(i).grad.view(0, p.get(i).grad.shape());
        let wt = &self.wt[l];
        let scratch = &mut self.wgrad_scratch;
        let mut wgrad = |dy: &Tensor<bf16>, x: &Tensor<bf16>, i: usize| gemm_split_k(gpu, dy.t(), x, &mut dw(i)?, scratch);

        // MLP: h[l+1] = h_mid + u·W2ᵀ, u = silu(a), a = xn2·W1ᵀ.
        wgrad(&g.dh, &a.u, lp.w2)?;
        gemm(gpu, &g.dh, wt[5].t(), &mut g.da, &Epilogue::new().silu_grad(&a.a))?;
        wgrad(&g.da, &a.xn2, lp.w1)?;
        gemm(gpu, &g.da, wt[4].t(), &mut g.dxn, &Epilogue::new())?;
        let saved2 = Saved::LayerNorm { mean: &a.mean2, rstd: &a.rstd2 };
        let grads2 = NormGrads { dx: &mut g.dh_mid, dw: &mut dw(lp.ln2)?, db: None };
        norm_backward(gpu, &g.dxn, &a.h_mid, w(lp.ln2), saved2, Some(&g.dh), grads2, &mut self.norm_scratch)?;

        // Attention: h_mid = x + o·Woᵀ, o = attn(q, k, v).
        wgrad(&g.dh_mid, &a.o, lp.wo)?;
        gemm(gpu, &g.dh_mid, wt[3].t(), &mut g.d_o, &Epilogue::new())?;
        let shaped = |t: &Tensor<bf16>, rows: usize| t.view(0, &[batch, rows, heads, dh_]);
        let (q4, k4, v4, o4, do4) = (shaped(&a.q, s)?, shaped(&a.k, m)?, shaped(&a.v, m)?, shaped(&a.o, s)?, shaped(&g.d_o, s)?);
        let (mut dq4, mut dk4, mut dv4) = (shaped(&g.dq, s)?, shaped(&g.dk, m)?, shaped(&g.dv, m)?);
        let grads = [&mut dq4, &mut dk4, &mut dv4];
        attention_backward_with(gpu, [&q4, &k4, &v4, &o4, &do4], &a.lse, grads, Attention::default(), Some(&mut self.attn_scratch))?;
        // q = xn1·Wqᵀ over every row; k, v over the context rows.
        gpu.copy_rows(&a.xn1, &mut a.xn1_ctx, [batch, m * d], [s * d, m * d])?;
        wgrad(&g.dq, &a.xn1, lp.wq)?;
        wgrad(&g.dk, &a.xn1_ctx, lp.wk)?;
        wgrad(&g.dv, &a.xn1_ctx, lp.wv)?;
        gemm(gpu, &g.dq, wt[0].t(), &mut g.dxn, &Epilogue::new())?;
        let back = context_back_plan(batch, m, s, d);
        launch_plan(gpu, None, &back, &g.dk, &wt[1], &mut g.dxn, &Epilogue::new().accumulate(1.0))?;
        launch_plan(gpu, None, &back, &g.dv, &wt[2], &mut g.dxn, &Epilogue::new().accumulate(1.0))?;
        let saved1 = Saved::LayerNorm { mean: &a.mean1, rstd: &a.rstd1 };
        let grads1 = NormGrads { dx: &mut g.dh, dw: &mut dw(lp.ln1)?, db: None };
        norm_backward(gpu, &g.dxn, x, w(lp.ln1), saved1, Some(&g.dh_mid), grads1, &mut self.norm_scratch)
    }

    /// The backward from the loss (gradient 1) to every parameter's gradient.
    pub fn backward(&mut self, gpu: &Gpu) -> Result<()> {
        if self.fp8_attention {
            return Err(Error::Invalid("backward: the forward ran FP8 attention, which has no backward; set_fp8_attention(false) first".into()));
        }
        let Shape { batch, context: m, targets: n } = self.shape;
        let (d, s, layers) = (self.cfg.d_model, self.shape.seq(), self.cfg.layers);
        let fwd = self.head2_plan();
        let (p, g) = (&self.params, &mut self.g);
        let dw = |i: usize| p.get(i).grad.view(0, p.get(i).grad.shape());

        // The mixture loss and the heads' second layer, per head.
        gmm_nll_backward(gpu, &self.out, &self.y, 1.0, &mut g.dout)?;
        let dout = g.dout.view(0, &[batch * n, self.cfg.components * 3])?;
        // dW2[g] = dout[:, g]ᵀ·hid[:, g], the diagonal blocks of doutᵀ·hid: one product
        // split along the R target rows, then K block copies. (Per head, batched,
        // the product was 3 rows by ffp, R deep: 220 small blocks, each streaming
        // R rows one after the other; 1.17 ms at the small shape, where reading
        // hid once takes 0.3. The other heads' blocks cost K times the FLOPs of
        // a product that is bound by reading hid.) dout's 30-value rows are
        // copied into 16-byte ones first: unaligned, every copy of A took the
        // masked path, and the product ran 1.12 ms.
        let (heads, ffp, padded) = (self.cfg.components, fwd.k, self.dout_padded.shape()[1]);
        gpu.copy_rows(&dout, &mut self.dout_padded, [fwd.m, heads * 3], [heads * 3, padded])?;
        gemm_split_k(gpu, self.dout_padded.t(), &self.hid, &mut self.dhead2_pairs, &mut self.wgrad_scratch)?;
        let dw2 = dw(self.head2)?;
        for h in 0..heads {
            let block = self.dhead2_pairs.view(h * 3 * heads * ffp + h * ffp, &[2 * heads * ffp + ffp])?;
            gpu.copy_rows(&block, &mut dw2.view(h * 3 * ffp, &[3 * ffp])?, [3, ffp], [heads * ffp, ffp])?;
        }
        // dhid_pre[:, g] = dout[:, g]·W2[g] ⊙ silu'(hid_pre), with W2[g]ᵀ `[ffp, 3]` as B.
        transpose(gpu, &p.get(self.head2).w, &mut self.head2t)?;
        let dhid_plan = Plan { m: fwd.m, n: fwd.k, k: 3, batch: fwd.batch, ld: [fwd.ld[2], 3, fwd.ld[0]], stride: [3, 3 * fwd.k, fwd.k, 0], ta: false, tb: true };
        launch_plan(gpu, None, &dhid_plan, &dout, &self.head2t, &mut g.dhid, &Epilogue::new().silu_grad(&self.hid_pre))?;
        // The heads' first layer: one GEMM over all heads.
        gemm_split_k(gpu, g.dhid.t(), &self.xf, &mut dw(self.head1)?, &mut self.wgrad_scratch)?;
        transpose(gpu, &p.get(self.head1).w, &mut self.head1t)?;
        gemm(gpu, &g.dhid, self.head1t.t(), &mut g.dxf, &Epilogue::new())?;
        let savedf = Saved::LayerNorm { mean: &self.meanf, rstd: &self.rstdf };
        let gradsf = NormGrads { dx: &mut g.dh_tgt, dw: &mut dw(self.lnf)?, db: None };
        norm_backward(gpu, &g.dxf, &self.h_tgt, &p.get(self.lnf).w, savedf, None, gradsf, &mut self.head_norm_scratch)?;
        // Only the target rows reach the loss: the context rows' gradient starts at zero.
        gpu.fill_bytes(&mut g.dh, 0)?;
        let mut tgt_rows = g.dh.view(m * d, &[g.dh.numel() - m * d])?;
        gpu.copy_rows(&g.dh_tgt, &mut tgt_rows, [batch, n * d], [n * d, s * d])?;

        for l in (0..layers).rev() {
            let lp = &self.layers[l];
            for (i, w) in [lp.wq, lp.wk, lp.wv, lp.wo, lp.w1, lp.w2].into_iter().enumerate() {
                transpose(gpu, &self.params.get(w).w, &mut self.wt[l][i])?;
            }
            self.layer_backward(gpu, l)?;
        }
        let mut dembed = self.params.get(self.embed).grad.view(0, self.params.get(self.embed).grad.shape())?;
        gemm_split_k(gpu, self.g.dh.t(), &self.tokens, &mut dembed, &mut self.wgrad_scratch)
    }

    // ---- the step --------------------------------------------------------------------------

    /// One training step on the loaded batch: forward, backward, AdamW.
    pub fn step(&mut self, gpu: &Gpu) -> Result<()> {
        self.params.begin_step(gpu)?;
        self.step_work(gpu)
    }

    /// What a step queues on the GPU, and what a graph captures.
    fn step_work(&mut self, gpu: &Gpu) -> Result<()> {
        self.forward(gpu)?;
        self.backward(gpu)?;
        self.params.update(gpu)
    }

    /// The step's work captured as a CUDA graph. Run one eager step first
    /// (it loads the kernels and makes the tensor maps the graph reuses).
    pub fn capture(&mut self, gpu: &Gpu) -> Result<Graph> {
        gpu.capture(|| self.step_work(gpu))
    }

    /// One step by replaying `graph` (from [`TransformerNp::capture`]) on the loaded batch.
    pub fn step_graph(&mut self, gpu: &Gpu, graph: &Graph) -> Result<()> {
        self.params.begin_step(gpu)?;
        graph.replay()
    }

    /// The loaded batch as the model saw it (tokens rounded to bf16): `(tokens, y)`.
    pub fn inputs(&self, gpu: &Gpu) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((gpu.download(&self.tokens)?.iter().map(|x| x.to_f32()).collect(), gpu.download(&self.y)?))
    }

    /// The last step's loss (waits for it).
    pub fn read_loss(&self, gpu: &Gpu) -> Result<f32> {
        Ok(gpu.download(&self.loss)?[0])
    }
}

/// `C[b, :M] += G[b]·W` for every sequence b (B the transposed copy `Wᵀ`):
/// a key or value gradient `[B·M, d]` taken back through its weight into the
/// context rows of LN1's output gradient `[B, S, d]`.
fn context_back_plan(batch: usize, m: usize, s: usize, d: usize) -> Plan {
    Plan { m, n: d, k: d, batch, ld: [d, d, d], stride: [m * d, 0, s * d, 0], ta: false, tb: true }
}
