//! QuasarAttention, the layer of seed 002, forward and backward on
//! rustile's ops, as llm.c writes a model: plain buffers made once for a
//! shape, each step's forward and backward side by side, one file.
//!
//! ```text
//! q, k, v = silu(conv(x·Wqᵀ)), silu(conv(x·Wkᵀ)), silu(conv(x·Wvᵀ))   (causal, width 4, per channel)
//! β       = softplus(β_log)                                         (per head)
//! o       = delta_rule(q, k, v, β)                                  (heads of 64)
//! g       = (x·Wg1ᵀ)·Wg2ᵀ + b_g                                     (hidden → 64 → hidden)
//! y       = RMSNorm(o)·w ⊙ sigmoid(g)                               (per head, eps 1e-5)
//! out     = y·Woᵀ
//! ```
//!
//! The seed's layer is hidden 512, 8 heads of 64 ([`Config::SEED`]);
//! smaller ones run the same code (the tests' CPU-interpreter runs).
use rand::{rngs::StdRng, Rng, SeedableRng};
use rustile::bf16;
use rustile_host::{Error, Gpu, Result, Tensor};
use rustile_ops::adamw::AdamW;
use rustile_ops::delta_rule::{delta_rule_backward_in, delta_rule_in, DeltaRule, DeltaRuleGrads, Workspace, D};
use rustile_ops::gemm::{gemm, gemm_split_k, split_k_scratch, Epilogue, Transpose};
use rustile_ops::quasar::{conv_silu_backward, gated_out_proj, gated_out_proj_fuses, gated_rms_norm, gated_rms_norm_backward, proj_conv_silu, softplus, softplus_backward, ConvScratch, NormScratch, WIDTH};
use rustile_ops::transpose::transpose;

use crate::params::{Declared, Params};

/// The gated norm's epsilon.
pub const EPS: f32 = 1e-5;

/// The layer's widths.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub hidden: usize,
    pub heads: usize,
    /// The gate's bottleneck.
    pub gate_rank: usize,
}

impl Config {
    /// The seed's: hidden 512, 8 heads of 64, a gate of rank 64.
    pub const SEED: Config = Config { hidden: 512, heads: 8, gate_rank: 64 };
}

/// Indices of the layer's parameters in [`Quasar::params`], in the order
/// [`Quasar::PARAMS`] names them.
const WQ: usize = 0;
const WK: usize = 1;
const WV: usize = 2;
const WG1: usize = 3;
const WG2: usize = 4;
const WO: usize = 5;
const CONV_Q: usize = 6;
const CONV_K: usize = 7;
const CONV_V: usize = 8;
const BETA_LOG: usize = 9;
const B_G: usize = 10;
const NORM_W: usize = 11;

/// The two views the layer takes of an activation: `[batch·tokens, width]`
/// rows (for the GEMMs) and `[batch, tokens, heads, 64]` (for the delta rule).
#[derive(Clone, Copy)]
struct Views {
    rows: usize,
    heads: [usize; 4],
}

impl Views {
    fn flat(&self, t: &Tensor<bf16>) -> Result<Tensor<bf16>> {
        t.view(0, &[self.rows, t.numel() / self.rows.max(1)])
    }

    fn heads(&self, t: &Tensor<bf16>) -> Result<Tensor<bf16>> {
        t.view(0, &self.heads)
    }
}

/// The layer, its parameters and every buffer a forward and backward of
/// `[batch, tokens, hidden]` use.
pub struct Quasar {
    pub cfg: Config,
    pub batch: usize,
    pub tokens: usize,
    pub params: Params,
    /// The input, `[batch, tokens, hidden]`.
    pub x: Tensor<bf16>,
    /// q, k, v before and after their convolution, `[batch, tokens, hidden]` each.
    pre: [Tensor<bf16>; 3],
    qkv: [Tensor<bf16>; 3],
    beta: Tensor<f32>,
    o: Tensor<bf16>,
    g1: Tensor<bf16>,
    g: Tensor<bf16>,
    rstd: Tensor<f32>,
    y: Tensor<bf16>,
    /// The output, `[batch, tokens, hidden]`.
    pub out: Tensor<bf16>,
    /// Whether [`Quasar::infer`] makes the gate, the gated norm and the output
    /// projection in one kernel (`ops::quasar::gated_out_proj`) instead of
    /// three steps. On by default, the faster (bench/RESULTS.md, 2026-11-28,
    /// "The gated norm in the output projection's prologue, 37 % faster…");
    /// the bench prints both.
    pub fused_out: bool,
    /// The backward's: the gradient of `out` (set by the caller), of `x` (written).
    pub d_out: Tensor<bf16>,
    pub dx: Tensor<bf16>,
    dy: Tensor<bf16>,
    d_o: Tensor<bf16>,
    dg: Tensor<bf16>,
    dg1: Tensor<bf16>,
    dqkv: [Tensor<bf16>; 3],
    dpre: Tensor<bf16>,
    dbeta: Tensor<f32>,
    /// Transposed weights `[Wq, Wk, Wv, Wg1, Wg2, Wo]ᵀ` for the backward's products.
    wt: [Tensor<bf16>; 6],
    delta: Workspace<bf16>,
    conv: ConvScratch,
    norm: NormScratch,
    split: Tensor<f32>,
}

impl Quasar {
    /// The parameters' names, in index order.
    pub const PARAMS: [&'static str; 12] = ["wq", "wk", "wv", "wg1", "wg2", "wo", "conv_q", "conv_k", "conv_v", "beta_log", "b_g", "norm_w"];

    /// The layer with parameters drawn from `seed` (linear weights as
    /// PyTorch's `nn.Linear`, convolutions as `nn.Conv1d`, β_log = 0, the
    /// norm's weight 1) and buffers for inputs of `[batch, tokens, hidden]`.
    pub fn new(gpu: &Gpu, cfg: Config, batch: usize, tokens: usize, seed: u64) -> Result<Quasar> {
        let Config { hidden, heads, gate_rank } = cfg;
        if heads * D != hidden {
            return Err(Error::Shape(format!("Quasar: {heads} heads of {D} make {} channels, not the hidden {hidden}", heads * D)));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut uniform = |n: usize, fan_in: usize| -> Vec<f32> {
            let bound = 1.0 / (fan_in as f32).sqrt();
            (0..n).map(|_| rng.gen_range(-bound..bound)).collect()
        };
        let mut dec = Declared::default();
        for (name, [rows, cols]) in [("wq", [hidden, hidden]), ("wk", [hidden, hidden]), ("wv", [hidden, hidden]), ("wg1", [gate_rank, hidden]), ("wg2", [hidden, gate_rank]), ("wo", [hidden, hidden])] {
            dec.add(name, &[rows, cols], true, uniform(rows * cols, cols));
        }
        for name in ["conv_q", "conv_k", "conv_v"] {
            dec.add(name, &[WIDTH, hidden], false, uniform(WIDTH * hidden, WIDTH));
        }
        dec.add("beta_log", &[heads], false, vec![0.0; heads]);
        dec.add("b_g", &[hidden], false, uniform(hidden, gate_rank));
        dec.add("norm_w", &[D], false, vec![1.0; D]);
        let params = Params::new(gpu, dec, AdamW::default())?;

        let rows = batch * tokens;
        let act = || gpu.alloc::<bf16>(&[batch, tokens, hidden]);
        let wt = [
            gpu.alloc::<bf16>(&[hidden, hidden])?,
            gpu.alloc::<bf16>(&[hidden, hidden])?,
            gpu.alloc::<bf16>(&[hidden, hidden])?,
            gpu.alloc::<bf16>(&[hidden, gate_rank])?,
            gpu.alloc::<bf16>(&[gate_rank, hidden])?,
            gpu.alloc::<bf16>(&[hidden, hidden])?,
        ];
        Ok(Quasar {
            cfg,
            batch,
            tokens,
            params,
            x: act()?,
            pre: [act()?, act()?, act()?],
            qkv: [act()?, act()?, act()?],
            beta: gpu.alloc(&[heads])?,
            o: act()?,
            g1: gpu.alloc(&[rows, gate_rank])?,
            g: act()?,
            rstd: gpu.alloc(&[heads, rows])?,
            y: act()?,
            out: act()?,
            d_out: act()?,
            dx: act()?,
            dy: act()?,
            d_o: act()?,
            dg: act()?,
            dg1: gpu.alloc(&[rows, gate_rank])?,
            dqkv: [act()?, act()?, act()?],
            dpre: act()?,
            dbeta: gpu.alloc(&[heads])?,
            wt,
            delta: Workspace::new(gpu, &[batch, tokens, heads, D])?,
            conv: ConvScratch::new(gpu, &[batch, tokens, hidden])?,
            norm: NormScratch::new(gpu, rows, heads)?,
            split: split_k_scratch(gpu, hidden, hidden, rows.max(1))?,
            fused_out: true,
        })
    }

    fn views(&self) -> Views {
        Views { rows: self.batch * self.tokens, heads: [self.batch, self.tokens, self.cfg.heads, D] }
    }

    /// Bytes of the layer's buffers (parameters and their optimizer state aside).
    pub fn buffer_bytes(&self) -> usize {
        let bf = [&self.x, &self.o, &self.g1, &self.g, &self.y, &self.out, &self.d_out, &self.dx, &self.dy, &self.d_o, &self.dg, &self.dg1, &self.dpre];
        let three = self.pre.iter().chain(&self.qkv).chain(&self.dqkv);
        let f32s = [&self.beta, &self.rstd, &self.dbeta, &self.split];
        (bf.iter().map(|t| t.numel()).sum::<usize>() + three.map(|t| t.numel()).sum::<usize>()) * 2
            + f32s.iter().map(|t| t.numel()).sum::<usize>() * 4
            + self.delta.bytes()
            + self.conv.bytes()
    }

    // ---- forward ------------------------------------------------------------------------

    /// `out` from `x`, keeping what the backward reads.
    pub fn forward(&mut self, gpu: &Gpu) -> Result<()> {
        self.qkv_and_delta(gpu, true)?;
        self.gate_norm_out(gpu, false)
    }

    /// `out` from `x` for inference (what the seed times): the same
    /// function, with nothing kept for a backward (the projections write no
    /// `pre`). [`Quasar::backward`] needs a `forward` first.
    pub fn infer(&mut self, gpu: &Gpu) -> Result<()> {
        self.qkv_and_delta(gpu, false)?;
        self.gate_norm_out(gpu, self.fused_out)
    }

    /// q, k, v (and their projections `pre` where `keep`), β, and `o`.
    fn qkv_and_delta(&mut self, gpu: &Gpu, keep: bool) -> Result<()> {
        let p = &self.params;
        let w = |i: usize| &p.get(i).w;
        let view = self.views();
        // q, k, v: projection, then the short convolution and SiLU.
        // (One kernel on Hopper; `proj_conv_silu` says when it is two.)
        for (i, (wi, conv)) in [(WQ, CONV_Q), (WK, CONV_K), (WV, CONV_V)].into_iter().enumerate() {
            proj_conv_silu(gpu, &self.x, w(wi), w(conv), keep.then_some(&mut self.pre[i]), &mut self.qkv[i])?;
        }
        softplus(gpu, w(BETA_LOG), &mut self.beta)?;
        let [q, k, v] = [&self.qkv[0], &self.qkv[1], &self.qkv[2]].map(|t| view.heads(t));
        delta_rule_in(gpu, &mut self.delta, &q?, &k?, &v?, &self.beta, &mut view.heads(&self.o)?, None, DeltaRule::default())
    }

    /// The gate, through its bottleneck, the gated norm and the output
    /// projection: with `fused` (inference) the last three in one kernel
    /// where `ops::quasar::gated_out_proj` has it, else three steps that keep
    /// `g`, `y` and `rstd` for the backward.
    fn gate_norm_out(&mut self, gpu: &Gpu, fused: bool) -> Result<()> {
        let p = &self.params;
        let w = |i: usize| &p.get(i).w;
        let view = self.views();
        gemm(gpu, &view.flat(&self.x)?, w(WG1).t(), &mut self.g1, &Epilogue::new())?;
        if fused && gated_out_proj_fuses(gpu, self.cfg.gate_rank) {
            return gated_out_proj(gpu, &self.o, &self.g1, w(WG2), w(B_G), w(NORM_W), w(WO), EPS, &mut view.flat(&self.out)?);
        }
        gemm(gpu, &self.g1, w(WG2).t(), &mut view.flat(&self.g)?, &Epilogue::new().bias_per_column(w(B_G)))?;
        gated_rms_norm(gpu, &self.o, &self.g, w(NORM_W), EPS, &mut self.y, &mut self.rstd)?;
        gemm(gpu, &view.flat(&self.y)?, w(WO).t(), &mut view.flat(&self.out)?, &Epilogue::new())
    }

    // ---- backward -----------------------------------------------------------------------

    /// Every parameter's gradient and `dx` from `d_out`, after [`Quasar::forward`] on the same `x`.
    pub fn backward(&mut self, gpu: &Gpu) -> Result<()> {
        for (i, w) in [WQ, WK, WV, WG1, WG2, WO].into_iter().enumerate() {
            transpose(gpu, &self.params.get(w).w, &mut self.wt[i])?;
        }
        let p = &self.params;
        let dw = |i: usize| p.get(i).grad.view(0, p.get(i).grad.shape());
        let view = self.views();
        let x = view.flat(&self.x)?;

        // out = y·Woᵀ.
        let d_out = view.flat(&self.d_out)?;
        gemm_split_k(gpu, d_out.t(), &view.flat(&self.y)?, &mut dw(WO)?, &mut self.split)?;
        gemm(gpu, &d_out, self.wt[5].t(), &mut view.flat(&self.dy)?, &Epilogue::new())?;
        // y = RMSNorm(o)·w ⊙ sigmoid(g); g = g1·Wg2ᵀ + b_g; g1 = x·Wg1ᵀ.
        let w = |i: usize| &p.get(i).w;
        gated_rms_norm_backward(gpu, &self.dy, &self.o, &self.g, w(NORM_W), &self.rstd, &mut self.d_o, &mut self.dg, &mut dw(NORM_W)?, Some(&mut dw(B_G)?), &mut self.norm)?;
        let dg = view.flat(&self.dg)?;
        gemm_split_k(gpu, dg.t(), &self.g1, &mut dw(WG2)?, &mut self.split)?;
        gemm(gpu, &dg, self.wt[4].t(), &mut self.dg1, &Epilogue::new())?;
        gemm_split_k(gpu, self.dg1.t(), &x, &mut dw(WG1)?, &mut self.split)?;
        let mut dx = view.flat(&self.dx)?;
        gemm(gpu, &self.dg1, self.wt[3].t(), &mut dx, &Epilogue::new())?;

        // o = delta_rule(q, k, v, β), β = softplus(β_log).
        let [dq, dk, dv] = &mut self.dqkv;
        let (mut dq4, mut dk4, mut dv4) = (view.heads(dq)?, view.heads(dk)?, view.heads(dv)?);
        let grads = DeltaRuleGrads { dq: &mut dq4, dk: &mut dk4, dv: &mut dv4, dbeta: &mut self.dbeta, d_initial: None };
        let [q, k, v] = [&self.qkv[0], &self.qkv[1], &self.qkv[2]].map(|t| view.heads(t));
        delta_rule_backward_in(gpu, &mut self.delta, &q?, &k?, &v?, &self.beta, &view.heads(&self.d_o)?, None, grads, DeltaRule::default())?;
        softplus_backward(gpu, w(BETA_LOG), &self.dbeta, &mut dw(BETA_LOG)?)?;

        // q, k, v = silu(conv(x·Wᵀ)): the convolution's backward, then the projection's.
        for (i, (wi, conv)) in [(WQ, CONV_Q), (WK, CONV_K), (WV, CONV_V)].into_iter().enumerate() {
            conv_silu_backward(gpu, &self.pre[i], w(conv), &self.dqkv[i], &mut self.dpre, &mut dw(conv)?, &mut self.conv)?;
            let dpre = view.flat(&self.dpre)?;
            gemm_split_k(gpu, dpre.t(), &x, &mut dw(wi)?, &mut self.split)?;
            gemm(gpu, &dpre, self.wt[i].t(), &mut dx, &Epilogue::new().accumulate(1.0))?;
        }
        Ok(())
    }
}
