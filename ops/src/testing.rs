//! Helpers for checking kernels: fresh random inputs and the relative error
//! against a float64 reference. Used by the CPU tests, the GPU tests and the
//! bench; nothing here is tuned to any shape.
use rand::{rngs::StdRng, Rng, SeedableRng};
use rustile::{Elem, Kind};

/// A generator seeded from the OS, with its seed, so a failure can be replayed
/// (`RUSTILE_SEED=<seed>` fixes it).
pub fn rng() -> (StdRng, u64) {
    let seed = std::env::var("RUSTILE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen());
    (StdRng::seed_from_u64(seed), seed)
}

/// `n` values `offset + scale·N(0, 1)`, stored as `T`.
pub fn normal<T: Elem>(rng: &mut StdRng, n: usize, offset: f32, scale: f32) -> Vec<T> {
    (0..n).map(|_| T::from_f32(offset + scale * standard_normal(rng))).collect()
}

/// One standard normal draw (Box–Muller: two uniforms to one normal).
pub fn standard_normal(rng: &mut impl Rng) -> f32 {
    let (u, v): (f32, f32) = (rng.gen_range(f32::EPSILON..1.0), rng.gen());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

/// The values converted to another element type (rounded where `U` is narrower).
pub fn cast<T: Elem, U: Elem>(x: &[T]) -> Vec<U> {
    x.iter().map(|v| U::from_f32(v.to_f32())).collect()
}

/// The values as f64 (the reference computes on exactly what the kernel saw).
pub fn wide<T: Elem>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.to_f32() as f64).collect()
}

/// The largest error of saved row means, each against its row's own scale
/// (|mean| + std, from the reference `rstd`): that is what moves a norm's
/// output, and a mean near zero has no relative precision of its own.
pub fn mean_err(mean: &[f32], want_mean: &[f64], want_rstd: &[f64]) -> f64 {
    assert_eq!(mean.len(), want_mean.len(), "{} means, reference {}", mean.len(), want_mean.len());
    let err = |r: usize| (mean[r] as f64 - want_mean[r]).abs() / (want_mean[r].abs() + 1.0 / want_rstd[r]);
    worst((0..mean.len()).map(err))
}

/// The largest of `errs`; a NaN (an unwritten or broken element) gives infinity.
fn worst(errs: impl Iterator<Item = f64>) -> f64 {
    errs.fold(0.0, |a, e| if e.is_nan() { f64::INFINITY } else { a.max(e) })
}

/// ‖out − ref‖ / ‖ref‖; NaN anywhere (an unwritten or broken element) gives infinity.
pub fn rel_err<T: Elem>(out: &[T], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "output has {} elements, reference {}", out.len(), reference.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (o, r) in out.iter().zip(reference) {
        let o = o.to_f32() as f64;
        if !o.is_finite() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// The worst element's error against its own magnitude plus the
/// reference's rms, `|o − r| / (|r| + rms)`: unlike `rel_err`, one wrong
/// element (a mis-staged chunk of a matrix product) cannot hide in the norm,
/// and rounding the output to `T` costs at most `T`'s epsilon however heavy
/// the tail of the values (silu(a·b₁ᵀ)·(a·b₂ᵀ) has elements 15 rms out,
/// which an rms-relative measure failed on rounding alone). Compare with
/// `4·tolerance::<T>()`.
pub fn max_err<T: Elem>(out: &[T], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "output has {} elements, reference {}", out.len(), reference.len());
    let rms = (reference.iter().map(|r| r * r).sum::<f64>() / reference.len().max(1) as f64).sqrt();
    let scale = |r: f64| if r.abs() + rms == 0.0 { 1.0 } else { r.abs() + rms };
    worst(out.iter().zip(reference).map(|(o, r)| (o.to_f32() as f64 - r).abs() / scale(*r)))
}

/// Asserts a matrix product's output matches `want` both in norm
/// (`rel_err`) and element by element (`max_err`); `ctx` names the case.
pub fn assert_close<T: Elem>(out: &[T], want: &[f64], ctx: &str) {
    let (err, worst) = (rel_err(out, want), max_err(out, want));
    assert!(err <= tolerance::<T>(), "{ctx}: rel err {err:.2e}");
    assert!(worst <= 4.0 * tolerance::<T>(), "{ctx}: worst element off by {worst:.2e} of its magnitude plus the rms");
}

/// `out` (e4m3) is `want` rounded to the nearest e4m3 value, saturating at
/// ±448: each element within half an e4m3 step of `want`, plus 1e-3 of the
/// rms for the product's own error (FP8 tensor cores accumulate with less
/// than f32's precision: a near-cancelling sum can move by a step), and
/// ±448 where `|want| ≥ 448`.
pub fn assert_e4m3_close(out: &[rustile::F8E4M3], want: &[f64], ctx: &str) {
    assert_eq!(out.len(), want.len(), "{ctx}: {} values, expected {}", out.len(), want.len());
    let rms = (want.iter().map(|w| w * w).sum::<f64>() / want.len().max(1) as f64).sqrt();
    for (i, (o, &w)) in out.iter().zip(want).enumerate() {
        let o = o.to_f32() as f64;
        let ok = if w.abs() >= 448.0 { o == 448.0 * w.signum() } else { (o - w).abs() <= w.abs() / 16.0 + 1.0 / 1024.0 + 1e-3 * rms };
        assert!(ok, "{ctx}: element {i} is {o}, expected {w} rounded to e4m3");
    }
}

/// The largest |value| of `y`, and whether `got` (an amax a kernel
/// computed) is it within `rel` (1e-5 for an f32 accumulation; FP8 tensor
/// cores accumulate with less precision, 1e-3).
pub fn amax_matches(got: f32, y: &[f64], rel: f64) -> (f64, bool) {
    let top = y.iter().fold(0.0f64, |t, v| t.max(v.abs()));
    (top, (got as f64 - top).abs() <= rel * top)
}

/// The tolerance for outputs stored as `T` (rounding of the output itself dominates).
pub fn tolerance<T: Elem>() -> f64 {
    match T::KIND {
        Kind::F32 => 2e-6,
        Kind::Bf16 => 1e-2,
        Kind::F16 => 2e-3,
        Kind::E4M3 | Kind::E5M2 => 1e-1,
        Kind::U32 => 0.0,
        // Rounding to E2M1 moves a value by up to a quarter of it (0.75 → 1).
        Kind::E2M1x2 => 0.25,
    }
}

/// A buffer of NaNs (or the format's nearest), to prove every element gets written.
pub fn poisoned<T: Elem>(n: usize) -> Vec<T> {
    vec![T::from_f32(f32::NAN); n]
}

/// `data` (`batch` matrices of `rows×cols`, row-major) with each matrix
/// transposed: the stored form of an operand used as `x.t()`.
pub fn transpose<T: Copy>(data: &[T], batch: usize, rows: usize, cols: usize) -> Vec<T> {
    assert_eq!(data.len(), batch * rows * cols, "transpose: {} elements, not {batch}×{rows}×{cols}", data.len());
    let mut out = Vec::with_capacity(data.len());
    for x in data.chunks(rows * cols) {
        out.extend((0..rows * cols).map(|i| x[(i % rows) * cols + i / rows]));
    }
    out
}

/// Random inputs of a heads MLP (`dims` = rows, d, G, h, out): `[x, w1, b1,
/// w2, b2]`, weights scaled by 1/√fan-in so activations stay near unit size.
pub fn heads_inputs<T: Elem>(rng: &mut StdRng, [rows, d, g, h, out]: [usize; 5]) -> [Vec<T>; 5] {
    [
        normal(rng, rows * d, 0.0, 1.0),
        normal(rng, g * h * d, 0.0, 1.0 / (d as f32).sqrt()),
        normal(rng, g * h, 0.0, 0.5),
        normal(rng, g * out * h, 0.0, 1.0 / (h as f32).sqrt()),
        normal(rng, g * out, 0.0, 0.5),
    ]
}

/// Attention's `o` and `lse` against `reference::attention`'s `(o, lse)`:
/// `o` as [`assert_close`], each log-sum-exp within 1e-3 of `1 + |lse|`
/// (−∞ exactly, for a query that sees no key). `lse_at(z, h, i)` is the
/// index of sequence `z`, head `h`, query `i` in `lse`; `ctx` names the case.
#[allow(clippy::type_complexity)]
pub fn assert_attention_close<T: Elem>(o: &[T], lse: &[f32], lse_at: impl Fn(usize, usize, usize) -> usize, want: (Vec<f64>, Vec<Vec<Vec<f64>>>), ctx: &str) {
    let (want_o, want_lse) = want;
    assert_close(o, &want_o, ctx);
    for (z, heads) in want_lse.iter().enumerate() {
        for (h, rows) in heads.iter().enumerate() {
            for (i, &w) in rows.iter().enumerate() {
                let got = lse[lse_at(z, h, i)] as f64;
                let ok = if w == f64::NEG_INFINITY { got == f64::NEG_INFINITY } else { (got - w).abs() <= 1e-3 * (1.0 + w.abs()) };
                assert!(ok, "{ctx}: lse of sequence {z}, head {h}, query {i} is {got}, expected {w}");
            }
        }
    }
}

/// Each sequence's `(first query token, queries, first key token, keys)`
/// for sequences packed back to back (what `reference::attention` takes).
pub fn packed_seqs(q_lens: &[usize], k_lens: &[usize]) -> Vec<(usize, usize, usize, usize)> {
    let (mut qa, mut ka, mut seqs) = (0, 0, Vec::new());
    for (&lq, &lk) in q_lens.iter().zip(k_lens) {
        seqs.push((qa, lq, ka, lk));
        (qa, ka) = (qa + lq, ka + lk);
    }
    seqs
}

/// `reference::attention` of a fixed-length batch, with its options, as
/// `ops::attention` takes them.
#[allow(clippy::type_complexity)]
pub fn attention_want<T: Elem>(q: &[T], k: &[T], v: &[T], dims: crate::attention::Dims, opt: crate::attention::Attention) -> (Vec<f64>, Vec<Vec<Vec<f64>>>) {
    let crate::attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let keys = opt.keys.unwrap_or(sk);
    let seqs: Vec<_> = (0..batch).map(|z| (z * sq, sq, z * sk, keys)).collect();
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    crate::reference::attention(&wide(q), &wide(k), &wide(v), &seqs, [heads, kv_heads, d], scale, opt.causal)
}

/// `n` values drawn from Cauchy(0, `scale`) (heavy tails: a row of them is
/// dominated by a few huge values).
pub fn cauchy(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| scale * (std::f32::consts::PI * (rng.gen::<f32>() - 0.5)).tan()).collect()
}

/// Each `|out − ref| / (atol + rtol·|ref|)`: at most 1 where the element is
/// within `torch.allclose`'s bound; a NaN gives infinity.
fn allclose_ratios<'a>(out: &'a [f32], want: &'a [f64], rtol: f64, atol: f64) -> impl Iterator<Item = f64> + 'a {
    assert_eq!(out.len(), want.len(), "output has {} elements, reference {}", out.len(), want.len());
    out.iter().zip(want).map(move |(&o, &w)| {
        let r = (o as f64 - w).abs() / (atol + rtol * w.abs());
        if r.is_nan() { f64::INFINITY } else { r }
    })
}

/// The largest of [`allclose_ratios`]: at most 1 when every element is within the bound.
pub fn allclose_ratio(out: &[f32], want: &[f64], rtol: f64, atol: f64) -> f64 {
    worst(allclose_ratios(out, want, rtol, atol))
}

/// Every element within `atol + rtol·|ref|` (as `torch.allclose`), or a
/// panic naming the worst one and how many fail.
pub fn assert_allclose(out: &[f32], want: &[f64], rtol: f64, atol: f64, ctx: &str) {
    let ratios: Vec<f64> = allclose_ratios(out, want, rtol, atol).collect();
    let bad = ratios.iter().filter(|&&r| r > 1.0).count();
    if bad > 0 {
        let i = (0..ratios.len()).max_by(|&a, &b| ratios[a].total_cmp(&ratios[b])).unwrap();
        panic!("{ctx}: {bad} of {} elements outside atol {atol:.0e} + rtol {rtol:.0e}; worst [{i}] = {} against {}", out.len(), out[i], want[i]);
    }
}

/// One NVFP4 operand `[rows, k]` as GPU MODE's NVFP4 dual GEMM draws it
/// (its `generate_input`): `(values [rows, k/2], plain scales [rows, k/16])`.
/// Each byte is uniform over 0..255 and masked to `0b1011_1011` (each value
/// keeps its sign and low two bits: ±{0, 0.5, 1, 1.5}); each scale is a
/// uniform `[0, 1)` f32 rounded to e4m3, so zero and subnormal scales occur.
pub fn nvfp4_gpu_mode(rng: &mut StdRng, rows: usize, k: usize) -> (Vec<rustile::F4E2M1x2>, Vec<rustile::F8E4M3>) {
    assert_eq!(k % 16, 0, "nvfp4_gpu_mode: k = {k} is not a multiple of 16");
    let values = (0..rows * k / 2).map(|_| rustile::F4E2M1x2(rng.gen_range(0..255u8) & 0b1011_1011)).collect();
    let scales = (0..rows * k / 16).map(|_| rustile::F8E4M3::from_f32(rng.gen::<f32>())).collect();
    (values, scales)
}

/// A TriMul problem with fresh random values: `x` normal or Cauchy(0, 2)
/// (GPU MODE's two distributions), a 0/1 mask or none, and parameters as a
/// freshly initialized module would hold them, perturbed (linear weights
/// N(0, 1/fan_in); norm weights N(1, 0.2), biases N(0, 0.2)).
pub struct TriMulCase {
    pub dims: crate::trimul::Dims,
    pub x: Vec<f32>,
    pub mask: Option<Vec<f32>>,
    /// In the field order of `trimul::Params`.
    pub params: [Vec<f32>; 10],
}

impl TriMulCase {
    pub fn new(rng: &mut StdRng, dims: crate::trimul::Dims, cauchy_x: bool, masked: bool) -> TriMulCase {
        let crate::trimul::Dims { batch, n, dim, hidden } = dims;
        let rows = batch * n * n;
        let x = if cauchy_x { cauchy(rng, rows * dim, 2.0) } else { normal(rng, rows * dim, 0.0, 1.0) };
        let mask = masked.then(|| (0..rows).map(|_| rng.gen_range(0..2) as f32).collect());
        let mut linear = |out: usize, inp: usize| normal::<f32>(rng, out * inp, 0.0, 1.0 / (inp as f32).sqrt());
        let [lp, lg, rp, rg, og] = [(); 5].map(|_| linear(hidden, dim));
        let w_out = linear(dim, hidden);
        let params = [
            normal(rng, dim, 1.0, 0.2),
            normal(rng, dim, 0.0, 0.2),
            lp,
            lg,
            rp,
            rg,
            og,
            normal(rng, hidden, 1.0, 0.2),
            normal(rng, hidden, 0.0, 0.2),
            w_out,
        ];
        TriMulCase { dims, x, mask, params }
    }

    pub fn params<'a, W: Copy>(&'a self, each: impl Fn(&'a Vec<f32>) -> W) -> crate::trimul::Params<W> {
        crate::trimul::Params::from_fields(self.params.each_ref().map(each))
    }

    /// The parameters, x and the mask on the GPU, the weights prepared.
    pub fn upload(&self, gpu: &rustile_host::Gpu) -> rustile_host::Result<(crate::trimul::TriMul, rustile_host::Tensor<f32>, Option<rustile_host::Tensor<f32>>)> {
        use crate::trimul::{Dims, Params, TriMul};
        let Dims { batch, n, dim, hidden } = self.dims;
        let shapes = Params::<()>::shapes(dim, hidden);
        let params = self.params.iter().zip(&shapes).map(|(p, s)| gpu.upload(p, s)).collect::<rustile_host::Result<Vec<_>>>()?;
        let tm = TriMul::new(gpu, &Params::from_fields(std::array::from_fn(|i| &params[i])), dim, hidden)?;
        let x = gpu.upload(&self.x, &[batch, n, n, dim])?;
        let mask = self.mask.as_ref().map(|m| gpu.upload(m, &[batch, n, n])).transpose()?;
        Ok((tm, x, mask))
    }

    /// Pairs `[b, i, j]` to check a large output at: the four corners of the
    /// first and last batch's pair grid, then `random` drawn at random.
    pub fn sample_pairs(&self, rng: &mut StdRng, random: usize) -> Vec<[usize; 3]> {
        let crate::trimul::Dims { batch, n, .. } = self.dims;
        let mut at = vec![[0, 0, 0], [batch - 1, n - 1, n - 1], [0, 0, n - 1], [batch - 1, n - 1, 0]];
        at.extend((0..random).map(|_| [rng.gen_range(0..batch), rng.gen_range(0..n), rng.gen_range(0..n)]));
        at
    }

    /// The output rows of pairs `at` from a whole `[batch, n, n, dim]` output.
    pub fn rows_at(&self, out: &[f32], at: &[[usize; 3]]) -> Vec<f32> {
        let crate::trimul::Dims { n, dim, .. } = self.dims;
        at.iter().flat_map(|&[b, i, j]| out[((b * n + i) * n + j) * dim..][..dim].to_vec()).collect()
    }

    /// The float64 reference output.
    pub fn want(&self) -> Vec<f64> {
        let n = self.dims.n;
        self.want_at(&(0..self.dims.batch * n * n).map(|r| [r / (n * n), r / n % n, r % n]).collect::<Vec<_>>())
    }

    /// The float64 reference's output rows at pairs `[b, i, j]`, computed
    /// with the linear weights rounded to bf16, as `TriMul::new` stores them:
    /// the check is of the kernels' arithmetic. Against the fp32 weights the
    /// rounding alone moves an output by up to ~0.8 of the bound, and about
    /// one element in 10⁷ (Cauchy x, 128 channels) lands just past it.
    pub fn want_at(&self, at: &[[usize; 3]]) -> Vec<f64> {
        const LINEAR: [&str; 6] = ["left", "left_gate", "right", "right_gate", "out_gate", "out"];
        let params: [Vec<f64>; 10] = std::array::from_fn(|i| {
            let p = &self.params[i];
            if LINEAR.contains(&crate::trimul::PARAM_NAMES[i]) { wide(&cast::<f32, rustile::bf16>(p)) } else { wide(p) }
        });
        let p = crate::trimul::Params::from_fields(params.each_ref().map(|p| p.as_slice()));
        crate::reference::trimul_at(&wide(&self.x), self.mask.as_ref().map(|m| wide(m)).as_deref(), &p, self.dims, at)
    }
}

/// How far [`crate::attention::attention_fp8`] is from exact attention:
/// the relative error of `o` against float64 on the values it was given
/// (the dequantized e4m3 inputs: what rounding `P` to e4m3 costs) and
/// against float64 on the bf16 inputs (everything FP8 costs).
#[derive(Clone, Copy, Debug)]
pub struct Fp8AttentionErr {
    pub vs_dequantized: f64,
    pub vs_bf16_inputs: f64,
}

/// Runs [`crate::attention::attention_fp8`] on `gpu` (or the interpreter) on
/// fresh normal q, k, v of `dims` (q and k `spread` wide, so that the
/// scores' softmax is that peaked), checks it and returns its error. The
/// log-sum-exp must match float64 on the dequantized inputs to 1e-3 (it
/// does not see `P`'s rounding), `o` to [`FP8_P_TOL`], and nothing may be
/// NaN.
pub fn check_attention_fp8(gpu: &rustile_host::Gpu, dims: crate::attention::Dims, opt: crate::attention::Attention, spread: f32) -> Fp8AttentionErr {
    use crate::attention::{attention_fp8, dequantize_heads, quantize_heads, Fp8Layout};
    use rustile::bf16;
    let crate::attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (mut rng, seed) = rng();
    let q: Vec<bf16> = normal(&mut rng, batch * sq * heads * d, 0.0, spread);
    let k: Vec<bf16> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, spread);
    let v: Vec<bf16> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let ctx = format!("attention_fp8 {dims:?} {opt:?} spread {spread} (seed {seed})");
    let up = |x: &[bf16], h: usize, n: usize| gpu.upload(x, &[batch, n, h, d]).unwrap();
    let (tq, tk, tv) = (up(&q, heads, sq), up(&k, kv_heads, sk), up(&v, kv_heads, sk));
    let q8 = quantize_heads(gpu, &tq, None, Fp8Layout::Tokens).unwrap();
    let k8 = quantize_heads(gpu, &tk, None, Fp8Layout::Tokens).unwrap();
    let v8 = quantize_heads(gpu, &tv, None, Fp8Layout::ValuesT).unwrap();
    let mut o = gpu.alloc::<bf16>(&[batch, sq, heads, d]).unwrap();
    let mut lse = gpu.alloc::<f32>(&[batch, heads, sq]).unwrap();
    attention_fp8(gpu, &q8, &k8, &v8, &mut o, &mut lse, opt).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    let deq = [&q8, &k8, &v8].map(|x| dequantize_heads(gpu, x).unwrap().iter().map(|&y| y as f64).collect::<Vec<f64>>());
    let seqs: Vec<_> = (0..batch).map(|z| (z * sq, sq, z * sk, sk)).collect();
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let (want_o, want_lse) = crate::reference::attention(&deq[0], &deq[1], &deq[2], &seqs, [heads, kv_heads, d], scale, opt.causal);
    for (z, per_head) in want_lse.iter().enumerate() {
        for (h, rows) in per_head.iter().enumerate() {
            for (i, &w) in rows.iter().enumerate() {
                let got = lse[(z * heads + h) * sq + i] as f64;
                assert!((got - w).abs() <= 1e-3 * (1.0 + w.abs()), "{ctx}: lse of sequence {z}, head {h}, query {i} is {got}, expected {w}");
            }
        }
    }
    assert!(o.iter().all(|x| x.to_f32().is_finite()), "{ctx}: o has a NaN or infinity");
    let vs_dequantized = rel_err(&o, &want_o);
    assert!(vs_dequantized <= FP8_P_TOL, "{ctx}: o's rel err against the dequantized inputs is {vs_dequantized:.2e}");
    let want = crate::reference::attention(&wide(&q), &wide(&k), &wide(&v), &seqs, [heads, kv_heads, d], scale, opt.causal).0;
    Fp8AttentionErr { vs_dequantized, vs_bf16_inputs: rel_err(&o, &want) }
}

/// The relative error of FP8 attention's `o` against its own (dequantized)
/// inputs: `P` rounded to e4m3 is off by up to 2^-4 of each value, a
/// random sign each, so `o` by about that over the root of the keys that
/// count, and the bf16 output rounding adds 2^-9.
pub const FP8_P_TOL: f64 = 0.04;

/// A delta-rule problem ([`crate::delta_rule`]) with fresh random inputs:
/// `lens` sequences (a batch of equal ones, or packed when `varlen`),
/// `heads` heads, q and v standard normal, each key a random direction of
/// squared norm `lambda(rng)`, β uniform in [0.2, 2], and a random initial
/// state if `initial`.
pub struct DeltaRuleCase {
    pub lens: Vec<usize>,
    pub varlen: bool,
    pub heads: usize,
    pub q: Vec<rustile::bf16>,
    pub k: Vec<rustile::bf16>,
    pub v: Vec<rustile::bf16>,
    pub beta: Vec<f32>,
    pub initial: Option<Vec<f32>>,
}

impl DeltaRuleCase {
    pub fn new(rng: &mut StdRng, lens: &[usize], varlen: bool, heads: usize, lambda: impl Fn(&mut StdRng) -> f32, initial: bool) -> Self {
        const D: usize = crate::delta_rule::D;
        assert!(varlen || lens.iter().all(|&n| n == lens[0]), "a fixed-length batch has sequences of one length");
        let rows = lens.iter().sum::<usize>() * heads;
        let mut k = Vec::with_capacity(rows * D);
        for _ in 0..rows {
            let z: Vec<f32> = (0..D).map(|_| standard_normal(rng)).collect();
            let scale = lambda(rng).sqrt() / z.iter().map(|x| x * x).sum::<f32>().sqrt();
            k.extend(z.iter().map(|x| rustile::bf16::from_f32(x * scale)));
        }
        let beta = (0..heads).map(|_| rng.gen_range(0.2..2.0)).collect();
        let initial = initial.then(|| (0..lens.len() * heads * D * D).map(|_| 0.1 * standard_normal(rng)).collect());
        DeltaRuleCase { lens: lens.to_vec(), varlen, heads, q: normal(rng, rows * D, 0.0, 1.0), k, v: normal(rng, rows * D, 0.0, 1.0), beta, initial }
    }

    /// `[batch, tokens, heads, 64]` of the inputs.
    pub fn shape(&self) -> [usize; 4] {
        let d = crate::delta_rule::D;
        if self.varlen { [1, self.lens.iter().sum(), self.heads, d] } else { [self.lens.len(), self.lens[0], self.heads, d] }
    }

    /// The float64 recurrence on exactly these inputs: outputs and final states.
    pub fn want(&self) -> (Vec<f64>, Vec<f64>) {
        let beta: Vec<f64> = self.beta.iter().map(|&b| b as f64).collect();
        let initial = self.initial.as_ref().map(|s| wide(s));
        crate::reference::delta_rule(&wide(&self.q), &wide(&self.k), &wide(&self.v), &beta, &self.sequences(), self.heads, initial.as_deref())
    }

    /// Runs [`crate::delta_rule::delta_rule`] on `gpu` (the chunked form,
    /// over `segments` segments if given, or the recurrence): `o` and the
    /// final states, downloaded.
    pub fn run(&self, gpu: &rustile_host::Gpu, recurrent: bool, segments: Option<usize>) -> rustile_host::Result<(Vec<rustile::bf16>, Vec<f32>)> {
        use crate::delta_rule::{delta_rule, DeltaRule, VarLens, D};
        let shape = self.shape();
        let [q, k, v] = [&self.q, &self.k, &self.v].map(|x| gpu.upload(x, &shape));
        let (q, k, v) = (q?, k?, v?);
        let beta = gpu.upload(&self.beta, &[self.heads])?;
        let state_shape = [self.lens.len(), self.heads, D, D];
        let initial = self.initial.as_ref().map(|s| gpu.upload(s, &state_shape)).transpose()?;
        let varlen = if self.varlen { Some(VarLens::new(gpu, &self.lens)?) } else { None };
        let mut o = gpu.upload(&poisoned::<rustile::bf16>(q.numel()), &shape)?;
        let mut state = gpu.upload(&poisoned::<f32>(state_shape.iter().product()), &state_shape)?;
        let opt = DeltaRule { initial: initial.as_ref(), varlen: varlen.as_ref(), recurrent, segments };
        delta_rule(gpu, &q, &k, &v, &beta, &mut o, Some(&mut state), opt)?;
        Ok((gpu.download(&o)?, gpu.download(&state)?))
    }

    /// Relative errors (‖·‖ over ‖reference‖) of `o` and of the final states.
    pub fn errors(&self, gpu: &rustile_host::Gpu, recurrent: bool, segments: Option<usize>) -> rustile_host::Result<(f64, f64)> {
        let ((o, state), (want_o, want_state)) = (self.run(gpu, recurrent, segments)?, self.want());
        Ok((rel_err(&o, &want_o), rel_err(&state, &want_state)))
    }

    fn sequences(&self) -> Vec<(usize, usize)> {
        let firsts = self.lens.iter().scan(0, |at, &n| {
            *at += n;
            Some(*at - n)
        });
        firsts.zip(self.lens.iter().copied()).collect()
    }

    /// Fresh random gradients of the outputs: `d_o` (like `o`, standard
    /// normal) and, if `with_final`, of the final states.
    pub fn output_grads(&self, rng: &mut StdRng, with_final: bool) -> DeltaRuleOutputGrads {
        let state_len = self.lens.len() * self.heads * crate::delta_rule::D * crate::delta_rule::D;
        DeltaRuleOutputGrads { d_o: normal(rng, self.q.len(), 0.0, 1.0), d_final: with_final.then(|| (0..state_len).map(|_| 0.1 * standard_normal(rng)).collect()) }
    }

    /// The float64 recurrence's gradients on exactly these inputs.
    pub fn want_grads(&self, out: &DeltaRuleOutputGrads) -> crate::reference::DeltaRuleGrads {
        let beta: Vec<f64> = self.beta.iter().map(|&b| b as f64).collect();
        let initial = self.initial.as_ref().map(|s| wide(s));
        let d_final = out.d_final.as_ref().map(|s| wide(s));
        crate::reference::delta_rule_backward(
            &wide(&self.q), &wide(&self.k), &wide(&self.v), &beta, &self.sequences(), self.heads, initial.as_deref(), &wide(&out.d_o), d_final.as_deref(),
        )
    }

    /// Runs [`crate::delta_rule::delta_rule_backward`] on `gpu`: `[dq, dk,
    /// dv]`, `dβ` and the initial states' gradients, downloaded.
    pub fn run_backward(&self, gpu: &rustile_host::Gpu, out: &DeltaRuleOutputGrads, segments: Option<usize>) -> rustile_host::Result<DeltaRuleGotGrads> {
        use crate::delta_rule::{delta_rule_backward, DeltaRule, DeltaRuleGrads, VarLens, D};
        let shape = self.shape();
        let [q, k, v, d_o] = [&self.q, &self.k, &self.v, &out.d_o].map(|x| gpu.upload(x, &shape));
        let (q, k, v, d_o) = (q?, k?, v?, d_o?);
        let beta = gpu.upload(&self.beta, &[self.heads])?;
        let state_shape = [self.lens.len(), self.heads, D, D];
        let initial = self.initial.as_ref().map(|s| gpu.upload(s, &state_shape)).transpose()?;
        let d_final = out.d_final.as_ref().map(|s| gpu.upload(s, &state_shape)).transpose()?;
        let varlen = if self.varlen { Some(VarLens::new(gpu, &self.lens)?) } else { None };
        let poison = || gpu.upload(&poisoned::<rustile::bf16>(q.numel()), &shape);
        let (mut dq, mut dk, mut dv) = (poison()?, poison()?, poison()?);
        let mut dbeta = gpu.upload(&poisoned::<f32>(self.heads), &[self.heads])?;
        let mut d_initial = gpu.upload(&poisoned::<f32>(state_shape.iter().product()), &state_shape)?;
        let grads = DeltaRuleGrads { dq: &mut dq, dk: &mut dk, dv: &mut dv, dbeta: &mut dbeta, d_initial: Some(&mut d_initial) };
        let opt = DeltaRule { initial: initial.as_ref(), varlen: varlen.as_ref(), recurrent: false, segments };
        delta_rule_backward(gpu, &q, &k, &v, &beta, &d_o, d_final.as_ref(), grads, opt)?;
        Ok(DeltaRuleGotGrads { dqkv: [gpu.download(&dq)?, gpu.download(&dk)?, gpu.download(&dv)?], dbeta: gpu.download(&dbeta)?, d_initial: gpu.download(&d_initial)? })
    }

    /// Relative errors of `[dq, dk, dv, dβ, d_initial]` against the float64
    /// recurrence's; dβ's as [`dbeta_err`] measures it.
    pub fn grad_errors(&self, gpu: &rustile_host::Gpu, out: &DeltaRuleOutputGrads, segments: Option<usize>) -> rustile_host::Result<[f64; 5]> {
        let (got, want) = (self.run_backward(gpu, out, segments)?, self.want_grads(out));
        let [dq, dk, dv] = &got.dqkv;
        Ok([rel_err(dq, &want.dq), rel_err(dk, &want.dk), rel_err(dv, &want.dv), dbeta_err(&got.dbeta, &want), rel_err(&got.d_initial, &want.d_initial)])
    }
}

/// Relative tolerances of `[dq, dk, dv, dβ, d_initial]` against the float64
/// recurrence's: they come from products of bf16 operands (the recorded
/// states, U', Tα and the gradients made on the way; dk sums seven); dβ's
/// is one bf16 unit roundoff of the size of its terms before cancellation
/// ([`dbeta_err`]).
pub const DELTA_RULE_GRAD_TOL: [f64; 5] = [3e-2, 3e-2, 3e-2, 2e-3, 3e-2];

/// The error of `dβ` against the float64 recurrence's: the largest over the
/// heads of the difference over the size of the head's per-token terms
/// before any cancellation ([`crate::reference::DeltaRuleGrads::dbeta_scale`]).
/// Measured against the sum itself, a single token whose `k·q` nearly
/// cancels made one draw in forty fail; against this scale, rounding error
/// is bounded (the largest of 240 draws per length was 2.8e-4).
pub fn dbeta_err(got: &[f32], want: &crate::reference::DeltaRuleGrads) -> f64 {
    got.iter().zip(&want.dbeta).zip(&want.dbeta_scale).map(|((&g, w), scale)| (g as f64 - w).abs() / scale.max(1e-300)).fold(0.0, f64::max)
}

/// Gradients of a [`DeltaRuleCase`]'s outputs.
pub struct DeltaRuleOutputGrads {
    pub d_o: Vec<rustile::bf16>,
    pub d_final: Option<Vec<f32>>,
}

/// What [`DeltaRuleCase::run_backward`] got.
pub struct DeltaRuleGotGrads {
    pub dqkv: [Vec<rustile::bf16>; 3],
    pub dbeta: Vec<f32>,
    pub d_initial: Vec<f32>,
}

/// Random NVFP4 rows `[rows, k]`: E2M1 pairs with every code equally
/// likely; E4M3 scales from 2⁻⁴ to 2⁻¹ (so that a dual GEMM's output stays
/// inside fp16's range at K = 7168), with `odd_scales` one in eight a zero
/// or subnormal code; and the values they mean, in float64.
pub fn nvfp4_random(rng: &mut StdRng, rows: usize, k: usize, odd_scales: bool) -> (Vec<rustile::F4E2M1x2>, Vec<rustile::F8E4M3>, Vec<f64>) {
    use rustile::{F4E2M1x2, F8E4M3};
    let pairs: Vec<F4E2M1x2> = (0..rows * k / 2).map(|_| F4E2M1x2(rng.gen())).collect();
    let scales: Vec<F8E4M3> = (0..rows * k / 16)
        .map(|_| if odd_scales && rng.gen_range(0..8) == 0 { F8E4M3(rng.gen_range(0..8)) } else { F8E4M3::from_f32(rng.gen_range(0.0625f32..0.5)) })
        .collect();
    let values = crate::nvfp4::dequantize_cpu(&pairs, &scales, rows, k).into_iter().map(f64::from).collect();
    (pairs, scales, values)
}

/// GPU MODE's check of the NVFP4 dual GEMM, elementwise `|got − want| ≤
/// 1e-3 + 1e-3·|want|`: the first element outside it (index, got, want), if
/// any. A `want` past fp16's range must be that infinity, as GPU MODE's
/// reference is once cast to the output's fp16.
pub fn nvfp4_outside_tolerance(got: &[rustile::f16], want: &[f64]) -> Option<(usize, f64, f64)> {
    let within = |g: f64, w: f64| match rustile::f16::from_f64(w) {
        inf if inf.is_infinite() => g == inf.to_f64(),
        _ => (g - w).abs() <= 1e-3 + 1e-3 * w.abs(),
    };
    got.iter().zip(want).enumerate().map(|(i, (g, &w))| (i, g.to_f32() as f64, w)).find(|&(_, g, w)| !within(g, w))
}

/// Rows `rows` of the row-major `x` (`k` a row), gathered: the operand of a
/// float64 reference computed on sampled rows of a product too large to
/// check whole (`reference::matmul_nt(&gather_rows(a, rows, k), b, rows.len(), n, k)`).
pub fn gather_rows(x: &[f64], rows: &[usize], k: usize) -> Vec<f64> {
    rows.iter().flat_map(|&r| x[r * k..(r + 1) * k].iter().copied()).collect()
}
