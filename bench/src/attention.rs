//! Our side of the attention benchmark: the issue's shapes, each checked on
//! sampled queries against float64, then timed. PyTorch's SDPA (its flash
//! and cuDNN backends) runs the same shapes from `torch_baselines.py`, and
//! the rows are joined by op (`attn`, `attn_causal`) and shape
//! (`BxSqxSkxHxHkvxD`; `Sk` the keys used).
use crate::harness::{measure, MeasureCfg, Row, RUSTILE};

use rustile::{bf16, Elem};
use rustile_host::{Error, Gpu, Result, Tensor};
use rustile_ops::attention::{self, Attention, Dims};
use rustile_ops::reference;
use rustile_ops::testing::{normal, rel_err, rng, tolerance, wide};

/// One attention problem: `batch` sequences of `sq` queries over `sk` keys, causal or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub dims: Dims,
    pub causal: bool,
}

/// [`Shape`] from its sizes, in the order of its name (`BxSqxSkxHxHkvxD`).
fn shape([batch, sq, sk, heads, kv_heads, d]: [usize; 6], causal: bool) -> Shape {
    Shape { dims: Dims { batch, sq, sk, heads, kv_heads, d }, causal }
}

impl Shape {
    pub fn op(&self) -> &'static str {
        if self.causal { "attn_causal" } else { "attn" }
    }
    pub fn sizes(&self) -> [usize; 6] {
        let Dims { batch, sq, sk, heads, kv_heads, d } = self.dims;
        [batch, sq, sk, heads, kv_heads, d]
    }
    /// Bytes the forward must move at least: q, k, v read and o written, in bf16.
    pub fn bytes(&self) -> f64 {
        let Dims { batch, sq, sk, heads, kv_heads, d } = self.dims;
        (2 * batch * d * (2 * sq * heads + 2 * sk * kv_heads)) as f64
    }
    /// Forward FLOPs, `4·B·H·Sq·Sk·D`, the pairs a causal mask removes not counted.
    pub fn flops(&self) -> f64 {
        let Dims { batch, sq, sk, heads, d, .. } = self.dims;
        let pairs = if self.causal {
            // Query i sees min(i + 1, sk) keys.
            let full = sq.min(sk) as f64;
            full * (full + 1.0) / 2.0 + (sq.saturating_sub(sk) * sk) as f64
        } else {
            (sq * sk) as f64
        };
        4.0 * (batch * heads * d) as f64 * pairs
    }
}

/// The issue's shapes: 16k tokens of hidden 2048 at S = 512..16k, D 64 and
/// 128, causal and not; a vision encoder (64 × 256 tokens, 16 heads of 72);
/// rectangular M + N queries over M keys (10k + 1k, 8 heads; 200k + 5k).
pub fn issue_shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for d in [64, 128] {
        for s in [512, 1024, 2048, 4096, 8192, 16384] {
            for causal in [false, true] {
                let heads = 2048 / d;
                v.push(shape([16384 / s, s, s, heads, heads, d], causal));
            }
        }
    }
    v.push(shape([64, 256, 256, 16, 16, 72], false));
    v.push(shape([1, 11_000, 10_000, 8, 8, 64], false));
    v.push(shape([1, 205_000, 200_000, 8, 8, 64], false));
    v
}

/// `BxSqxSkxHxHkvxD[c]` (c: causal), comma-separated, or `issue` for [`issue_shapes`].
pub fn parse_shapes(spec: &[String]) -> std::result::Result<Vec<Shape>, String> {
    let mut out = Vec::new();
    for s in spec {
        if s == "issue" {
            out.extend(issue_shapes());
            continue;
        }
        let (body, causal) = match s.strip_suffix('c') {
            Some(b) => (b, true),
            None => (s.as_str(), false),
        };
        let n: Vec<usize> = body.split('x').map(|x| x.parse().map_err(|_| format!("bad attention shape `{s}`: expected BxSqxSkxHxHkvxD[c]"))).collect::<std::result::Result<_, _>>()?;
        let Ok(sizes) = <[usize; 6]>::try_from(n.as_slice()) else {
            return Err(format!("bad attention shape `{s}`: expected six numbers BxSqxSkxHxHkvxD, then c for causal"));
        };
        out.push(shape(sizes, causal));
    }
    Ok(out)
}

/// The spec strings of `shapes`, for the PyTorch script.
pub fn spec(shapes: &[Shape]) -> String {
    shapes.iter().map(|s| format!("{}{}", crate::harness::shape_str(&s.sizes()), if s.causal { "c" } else { "" })).collect::<Vec<_>>().join(",")
}

/// Float64 outputs of sampled queries (the first and last four of the first
/// and last head of the first and last sequence) against ours: the errors
/// of `o` and, with `(d_o, dq)`, of `dq` (a query's gradient needs only its
/// own row of scores; 0 without).
fn check_sampled<T: Elem>(s: &Shape, q: &[T], k: &[T], v: &[T], o: &[T], grad: Option<(&[T], &[T])>) -> (f64, f64) {
    let (Dims { batch, sq, sk, heads, kv_heads, d }, causal) = (s.dims, s.causal);
    let scale = 1.0 / (d as f64).sqrt();
    let (mut got, mut want, mut got_dq, mut want_dq) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut zs = vec![0, batch - 1];
    zs.dedup();
    let mut hs = vec![0, heads - 1];
    hs.dedup();
    let rows: Vec<usize> = (0..sq.min(4)).chain(sq.saturating_sub(4).max(4)..sq).collect();
    for &z in &zs {
        for &h in &hs {
            let kh = h / (heads / kv_heads);
            // Tokens 0..n of sequence z (of `len` tokens), head hh of hn.
            let head = |x: &[T], len: usize, n: usize, hh: usize, hn: usize| -> Vec<f64> {
                (0..n).flat_map(|t| wide(&x[((z * len + t) * hn + hh) * d..][..d])).collect()
            };
            let (kz, vz) = (head(k, sk, sk, kh, kv_heads), head(v, sk, sk, kh, kv_heads));
            for &i in &rows {
                // Query i alone over the keys it sees.
                let seen = if causal { sk.min(i + 1) } else { sk };
                let at = ((z * sq + i) * heads + h) * d;
                let qi = wide(&q[at..][..d]);
                want.extend(reference::attention_head(&qi, &kz, &vz, 1, seen, d, scale, false).0);
                got.extend_from_slice(&o[at..][..d]);
                if let Some((d_o, dq)) = grad {
                    let [gq, _, _] = reference::attention_head_grad(&qi, &kz, &vz, &wide(&d_o[at..][..d]), 1, seen, d, scale, false);
                    want_dq.extend(gq);
                    got_dq.extend_from_slice(&dq[at..][..d]);
                }
            }
        }
    }
    (rel_err(&got, &want), rel_err(&got_dq, &want_dq))
}

/// Checks and times `ops::attention` at each shape (bf16).
pub fn bench_attention(gpu: &Gpu, cfg: &MeasureCfg, shapes: &[Shape]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    eprintln!(
        "attention programs (RUSTILE_ATTENTION=mma or =wgmma picks): forward {:?} at D = 128, {:?} at D = 72; backward {:?}, {:?}",
        attention::Program::on(gpu, 128),
        attention::Program::on(gpu, 72),
        attention::Program::backward_on(gpu, 128),
        attention::Program::backward_on(gpu, 72),
    );
    for s in shapes {
        let (mut rng, seed) = rng();
        crate::harness::status(format!("attention {}", spec(&[*s])));
        let (Dims { batch, sq, sk, heads, kv_heads, d }, causal) = (s.dims, s.causal);
        let (qs, ks) = ([batch, sq, heads, d], [batch, sk, kv_heads, d]);
        let q: Vec<bf16> = normal(&mut rng, qs.iter().product(), 0.0, 1.0);
        let k: Vec<bf16> = normal(&mut rng, ks.iter().product(), 0.0, 1.0);
        let v: Vec<bf16> = normal(&mut rng, ks.iter().product(), 0.0, 1.0);
        let (dq_in, dk_in, dv_in) = (gpu.upload(&q, &qs)?, gpu.upload(&k, &ks)?, gpu.upload(&v, &ks)?);
        let mut o: Tensor<bf16> = gpu.alloc(&qs)?;
        let mut lse: Tensor<f32> = gpu.alloc(&[batch, heads, sq])?;
        let opt = Attention { causal, ..Attention::default() };
        gpu.fill_bytes(&mut o, 0xFF)?;
        attention::attention(gpu, &dq_in, &dk_in, &dv_in, &mut o, &mut lse, opt)?;
        // The backward too, counted as 2.5 forwards: o and the dq of the sampled queries are checked here (dk and dv by the GPU tests).
        let d_o_host = normal::<bf16>(&mut rng, qs.iter().product(), 0.0, 1.0);
        let d_o = gpu.upload(&d_o_host, &qs)?;
        let (mut dq, mut dk, mut dv) = (gpu.alloc::<bf16>(&qs)?, gpu.alloc::<bf16>(&ks)?, gpu.alloc::<bf16>(&ks)?);
        attention::attention_backward(gpu, [&dq_in, &dk_in, &dv_in, &o, &d_o], &lse, [&mut dq, &mut dk, &mut dv], opt)?;
        let (err, dq_err) = check_sampled(s, &q, &k, &v, &gpu.download(&o)?, Some((&d_o_host, &gpu.download(&dq)?)));
        eprintln!("{} {}: sampled rel err {err:.2e}, dq {dq_err:.2e} (seed {seed})", s.op(), spec(&[*s]));
        if err > tolerance::<bf16>() {
            return Err(Error::Launch { kernel: "attention".into(), msg: format!("wrong result at {s:?}: rel err {err:.2e} (seed {seed})") });
        }
        if dq_err > 2.0 * tolerance::<bf16>() {
            return Err(Error::Launch { kernel: "attention_backward".into(), msg: format!("wrong dq at {s:?}: rel err {dq_err:.2e} (seed {seed})") });
        }
        let stats = measure(gpu, cfg, || attention::attention(gpu, &dq_in, &dk_in, &dv_in, &mut o, &mut lse, opt))?;
        eprintln!("  {:.1} µs, {:.0} TFLOP/s", stats.median_ms * 1e3, s.flops() / stats.median_ms / 1e9);
        let fwd_ms = stats.median_ms;
        rows.push(Row::new(s.op(), &s.sizes(), bf16::NAME, RUSTILE, stats).flops(s.flops()).bytes(s.bytes()));
        let bwd = measure(gpu, cfg, || attention::attention_backward(gpu, [&dq_in, &dk_in, &dv_in, &o, &d_o], &lse, [&mut dq, &mut dk, &mut dv], opt))?;
        let (free, total) = gpu.mem_info()?;
        eprintln!(
            "  backward {:.1} µs, {:.0} TFLOP/s; forward + backward {:.2} ms; device memory in use (both passes' buffers) {:.2} GB",
            bwd.median_ms * 1e3,
            2.5 * s.flops() / bwd.median_ms / 1e9,
            fwd_ms + bwd.median_ms,
            (total - free) as f64 / 1e9
        );
        rows.push(Row::new(&format!("{}_bwd", s.op()), &s.sizes(), bf16::NAME, RUSTILE, bwd).flops(2.5 * s.flops()));
    }
    Ok(rows)
}

/// The FP8 forward at each shape of head dim 64 or 128 beside our bf16
/// forward on the same inputs (the issue's target is a ratio to it; SDPA
/// has no FP8 attention to compare): `attn_fp8` rows, ours (`rustile`) and
/// the bf16 program (`bf16 forward (ours)`, the baseline); `sweep` times
/// every FP8 config of the head dim too. Each shape is checked
/// first: sampled queries against float64 on the dequantized inputs (what
/// `P` in e4m3 costs) and the whole `o` against the bf16 forward's (what
/// FP8 costs); the quantizer's time is printed beside.
pub fn bench_attention_fp8(gpu: &Gpu, cfg: &MeasureCfg, shapes: &[Shape], sweep: bool) -> Result<Vec<Row>> {
    use attention::{attention_fp8, dequantize_heads, quantize_heads, Fp8Layout};
    let mut rows = Vec::new();
    for s in shapes.iter().filter(|s| s.dims.d == 64 || s.dims.d == 128) {
        let (mut rng, seed) = rng();
        crate::harness::status(format!("attention_fp8 {}", spec(&[*s])));
        let (Dims { batch, sq, sk, heads, kv_heads, d }, causal) = (s.dims, s.causal);
        let (qs, ks) = ([batch, sq, heads, d], [batch, sk, kv_heads, d]);
        let [q, k, v] = [qs, ks, ks].map(|shape| normal::<bf16>(&mut rng, shape.iter().product(), 0.0, 1.0));
        let (tq, tk, tv) = (gpu.upload(&q, &qs)?, gpu.upload(&k, &ks)?, gpu.upload(&v, &ks)?);
        let opt = Attention { causal, ..Attention::default() };
        let mut o: Tensor<bf16> = gpu.alloc(&qs)?;
        let mut lse: Tensor<f32> = gpu.alloc(&[batch, heads, sq])?;
        attention::attention(gpu, &tq, &tk, &tv, &mut o, &mut lse, opt)?;
        let o_bf16 = gpu.download(&o)?;
        let quantize = || -> Result<_> {
            Ok((quantize_heads(gpu, &tq, None, Fp8Layout::Tokens)?, quantize_heads(gpu, &tk, None, Fp8Layout::Tokens)?, quantize_heads(gpu, &tv, None, Fp8Layout::ValuesT)?))
        };
        let (q8, k8, v8) = quantize()?;
        let mut o8: Tensor<bf16> = gpu.alloc(&qs)?;
        gpu.fill_bytes(&mut o8, 0xFF)?;
        attention_fp8(gpu, &q8, &k8, &v8, &mut o8, &mut lse, opt)?;
        let got = gpu.download(&o8)?;
        let deq = [&q8, &k8, &v8].map(|x| dequantize_heads(gpu, x).map(|y| y.iter().map(|&f| bf16::from_f32(f)).collect::<Vec<bf16>>()));
        let [dq, dk, dv] = deq;
        // bf16 holds an e4m3 value times a power-of-two-free scale only approximately: the check's own error, far below P's.
        let (err, _) = check_sampled(s, &dq?, &dk?, &dv?, &got, None);
        let vs_bf16 = rel_err(&got, &wide(&o_bf16));
        eprintln!("{}_fp8 {}: sampled rel err against its own inputs {err:.2e}, o against the bf16 forward's {vs_bf16:.2e} (seed {seed})", s.op(), spec(&[*s]));
        if err > rustile_ops::testing::FP8_P_TOL || vs_bf16 > 0.1 {
            return Err(Error::Launch { kernel: "attention_fp8".into(), msg: format!("wrong result at {s:?}: rel err {err:.2e}, {vs_bf16:.2e} against bf16 (seed {seed})") });
        }
        let quant = measure(gpu, cfg, || quantize().map(|_| ()))?;
        let ours = measure(gpu, cfg, || attention_fp8(gpu, &q8, &k8, &v8, &mut o8, &mut lse, opt))?;
        let bf16_ = measure(gpu, cfg, || attention::attention(gpu, &tq, &tk, &tv, &mut o, &mut lse, opt))?;
        eprintln!(
            "  FP8 {:.1} µs ({:.0} TFLOP/s), bf16 {:.1} µs ({:.0}): {:.2}×; quantizing q, k, v {:.1} µs",
            ours.median_ms * 1e3,
            s.flops() / ours.median_ms / 1e9,
            bf16_.median_ms * 1e3,
            s.flops() / bf16_.median_ms / 1e9,
            bf16_.median_ms / ours.median_ms,
            quant.median_ms * 1e3
        );
        let op = format!("{}_fp8", s.op());
        rows.push(Row::new(&op, &s.sizes(), "e4m3", RUSTILE, ours).flops(s.flops()));
        rows.push(Row::new(&op, &s.sizes(), "e4m3", "bf16 forward (ours)", bf16_).flops(s.flops()));
        if sweep {
            for (i, c) in attention::attention_fwd_fp8_kernel::CONFIGS.iter().enumerate().filter(|(_, c)| c.get("D") == Some(d)) {
                let t = measure(gpu, cfg, || attention_fp8(gpu, &q8, &k8, &v8, &mut o8, &mut lse, opt.config(i)))?;
                eprintln!("  config {}: {:.1} µs ({:.0} TFLOP/s)", c.name, t.median_ms * 1e3, s.flops() / t.median_ms / 1e9);
            }
        }
    }
    Ok(rows)
}

// ---- the tuner's side: `cargo xtask autotune --arch sm90 --op attention` ------------------

/// The buckets tuned for Hopper's forward: head dims 64 and 128 at 16k
/// tokens of hidden 2048 (as [`issue_shapes`]) for S = 512 to 16k, causal
/// and not; 72 (the vision encoder's 256 tokens, and 1024) and 96 at 1024,
/// whose one config each is measured for the record. `quick`: S = 4096 at
/// 64 and 128.
pub fn tune_shapes(quick: bool) -> Vec<Shape> {
    let lengths: &[usize] = if quick { &[4096] } else { &[512, 1024, 2048, 4096, 8192, 16384] };
    let mut v = Vec::new();
    for d in [64, 128] {
        for &s in lengths {
            for causal in [false, true] {
                let heads = 2048 / d;
                v.push(shape([16384 / s, s, s, heads, heads, d], causal));
            }
        }
    }
    if !quick {
        v.push(shape([64, 256, 256, 16, 16, 72], false));
        v.push(shape([16, 1024, 1024, 16, 16, 72], false));
        v.push(shape([16, 1024, 1024, 16, 16, 96], false));
    }
    v
}

/// One tuning problem: fresh bf16 inputs on the GPU and on the host (for
/// the float64 check of sampled queries).
struct Problem<'a> {
    gpu: &'a Gpu,
    shape: Shape,
    host: [Vec<bf16>; 3],
    qkv: [Tensor<bf16>; 3],
    o: Tensor<bf16>,
    lse: Tensor<f32>,
}

impl<'a> Problem<'a> {
    fn new(gpu: &'a Gpu, shape: Shape) -> Result<Self> {
        let (mut rng, _) = rng();
        let Dims { batch, sq, sk, heads, kv_heads, d } = shape.dims;
        let (qs, ks) = ([batch, sq, heads, d], [batch, sk, kv_heads, d]);
        let host = [qs, ks, ks].map(|s| normal::<bf16>(&mut rng, s.iter().product(), 0.0, 1.0));
        let qkv = [(&host[0], &qs), (&host[1], &ks), (&host[2], &ks)].map(|(x, s)| gpu.upload(x, s));
        let [q, k, v] = qkv;
        Ok(Problem { gpu, shape, qkv: [q?, k?, v?], host, o: gpu.alloc(&qs)?, lse: gpu.alloc(&[batch, heads, sq])? })
    }

    fn run(&mut self, cfg: usize) -> Result<()> {
        let [q, k, v] = &self.qkv;
        let opt = Attention { causal: self.shape.causal, config: Some(cfg), ..Attention::default() };
        attention::attention(self.gpu, q, k, v, &mut self.o, &mut self.lse, opt)
    }

    /// Runs config `cfg` on a poisoned output and checks sampled queries against float64.
    fn check(&mut self, cfg: usize) -> Result<()> {
        self.gpu.fill_bytes(&mut self.o, 0xFF)?;
        self.run(cfg)?;
        let [q, k, v] = &self.host;
        let (err, _) = check_sampled(&self.shape, q, k, v, &self.gpu.download(&self.o)?, None);
        if err > tolerance::<bf16>() {
            return Err(Error::Launch { kernel: "attention".into(), msg: format!("sampled rel err {err:.2e}") });
        }
        Ok(())
    }
}

/// Tunes Hopper's forward (`kernel`, op `attention`): per bucket of
/// [`tune_shapes`] (`attention::forward_bucket`: head dim, mask, lengths),
/// the configs of that head dim.
pub fn tune(gpu: &Gpu, kernel: &str, quick: bool) -> Result<rustile_ops::tune::OpTable> {
    use crate::tune::{keep_bucket, measure_cfg, op_table, pruned, report, tune_bucket};
    let configs = attention::attention_fwd_wgmma_kernel::CONFIGS;
    let report = report(&rustile_host::native_arch(gpu.compute_capability()));
    let (mcfg, shapes) = (measure_cfg(quick), tune_shapes(quick));
    let mut buckets = vec![];
    let bar = crate::harness::progress(shapes.len(), "tune attention");
    for (si, s) in shapes.iter().enumerate() {
        let d = s.dims.d;
        let dp = configs.iter().filter_map(|c| c.get("D")).filter(|&dp| dp >= d).min().expect("a config holds every head dim up to 128");
        let candidates: Vec<usize> = (0..configs.len()).filter(|&i| configs[i].get("D") == Some(dp)).collect();
        let tag = format!("[{}/{}] attention {}", si + 1, shapes.len(), spec(&[*s]));
        bar.set_message(format!("{}: checking and timing {} configs", spec(&[*s]), candidates.len()));
        let mut p = Problem::new(gpu, *s)?;
        let verdict = |p: &mut Problem, i: usize| pruned(gpu, report.as_ref(), kernel, &configs[i], "bf16").or_else(|| p.check(i).err().map(|e| e.to_string()));
        let bucket = attention::forward_bucket(dp, s.causal, s.dims.sq, s.dims.sk);
        let tuned = tune_bucket(gpu, &mcfg, &tag, configs, &candidates, &mut p, verdict, |p, i| p.run(i))?;
        keep_bucket(&mut buckets, "attention", spec(&[*s]), bucket, tuned);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(op_table(gpu, "attention", kernel, report, buckets))
}
