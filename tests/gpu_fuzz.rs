//! Every op family through its public host API at random shapes, against
//! float64: sizes drawn from 1, small primes and a few thousand mixed with
//! uniform ones, and 0 wherever the API takes it (an empty output; a product
//! over k = 0, which is its epilogue alone; a sequence without queries or
//! keys); GEMM operands as stored and transposed, batched or shared; fused
//! epilogues drawn at random. Outputs are poisoned (all bits set, a NaN)
//! first, so an unwritten element fails. Sizes an API does not take must be
//! refused with a shape error whose message names the limit; each test
//! checks some of those too.
//!
//! Each test draws all its cases from one seeded generator and every
//! failure prints the seed: `RUSTILE_SEED=<seed> cargo test -p
//! rustile-tests --test gpu_fuzz <test>` replays them (add `--
//! --include-ignored` where the tests were built without a GPU). A case
//! keeps its float64 reference to about [`WORK`] multiply-adds, so a test
//! is a few seconds of host time and far less of GPU time.
use rand::rngs::StdRng;
use rand::Rng;
use rustile::{bf16, f16, Elem, F8E4M3, F8E5M2};
use rustile_host::{Error, Gpu, Tensor};
use rustile_ops::gemm::{Act, Bias, Cast, Epi, Epilogue, Mat, Transpose};
use rustile_ops::testing::{assert_attention_close, assert_close, mean_err, normal, rel_err, rng, tolerance, wide};
use rustile_ops::{attention, dual_gemm, gemm, gemm_fp8, grouped_gemm, mlp, norm, reference, softmax, testing, trimul, vector};
use rustile_tests::{gpu_or_skip, hopper_or_skip, poisoned, up};

// ---- helpers -----------------------------------------------------------------------------

/// Sizes the draws favour: 1, 2, small primes and a few thousand (none a
/// multiple of 8, so every tile they meet ends part-way).
const ODD: [usize; 13] = [1, 2, 3, 5, 7, 13, 31, 61, 127, 257, 1021, 2053, 3001];

/// The float64 multiply-adds a case's reference may take.
const WORK: usize = 200_000_000;

/// A size in `1..=max`: half the time one of [`ODD`] (those up to `max`), else uniform.
fn size(rng: &mut StdRng, max: usize) -> usize {
    let odd: Vec<usize> = ODD.into_iter().filter(|&s| s <= max).collect();
    if rng.gen_bool(0.5) {
        odd[rng.gen_range(0..odd.len())]
    } else {
        rng.gen_range(1..=max)
    }
}

/// [`size`], or 0 one time in ten (for sizes the API takes empty).
fn size0(rng: &mut StdRng, max: usize) -> usize {
    if rng.gen_ratio(1, 10) {
        0
    } else {
        size(rng, max)
    }
}

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())]
}

/// Draws with `f` until `fits` holds (a bound on the case's host-side work).
fn draw<S>(rng: &mut StdRng, mut f: impl FnMut(&mut StdRng) -> S, fits: impl Fn(&S) -> bool) -> S {
    loop {
        let s = f(rng);
        if fits(&s) {
            return s;
        }
    }
}

/// `run` was refused with a shape (or argument) error whose message contains `limit`.
fn assert_refused(run: Result<(), Error>, limit: &str, ctx: &str) {
    match run {
        Err(Error::Shape(msg) | Error::Invalid(msg)) if msg.contains(limit) => {}
        other => panic!("{ctx}: expected a shape error naming {limit:?}; got {other:?}"),
    }
}

const ACTS: [Act; 5] = [Act::None, Act::Relu, Act::Relu2, Act::Silu, Act::GeluTanh];

/// A value rounded to `T`, as a kernel stores it between two GEMMs.
fn round<T: Elem>(x: f64) -> f64 {
    T::from_f32(x as f32).to_f32() as f64
}

/// `batch` matrices of `rows×cols`, each transposed when `t`: an operand's stored form.
fn stored<T: Copy>(x: &[T], batch: usize, rows: usize, cols: usize, t: bool) -> Vec<T> {
    if t && rows * cols > 0 {
        testing::transpose(x, batch, rows, cols)
    } else {
        x.to_vec()
    }
}

/// A fused epilogue drawn at random: `(α, β, bias, activation, residual)`.
fn draw_epi(rng: &mut StdRng) -> (f32, f32, Bias, Act, bool) {
    let alpha = pick(rng, &[1.0, 1.0, 0.5, -1.25]);
    let beta = if rng.gen_ratio(1, 4) { 0.5 } else { 0.0 };
    let act = if rng.gen_bool(0.5) { Act::None } else { pick(rng, &ACTS) };
    (alpha, beta, pick(rng, &[Bias::None, Bias::PerColumn, Bias::PerRow]), act, rng.gen_ratio(1, 3))
}

// ---- elementwise and row ops -------------------------------------------------------------

fn vector_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, shape: &[usize], ctx: &str) {
    let n = shape.iter().product();
    let (x, y): (Vec<T>, Vec<T>) = (normal(rng, n, 0.0, 1.0), normal(rng, n, 0.0, 1.0));
    let (dx, dy) = (up(gpu, &x, shape), up(gpu, &y, shape));
    let mut out = poisoned::<T>(gpu, shape);
    vector::add(gpu, &dx, &dy, &mut out).unwrap_or_else(|e| panic!("add<{}> {ctx}: {e}", T::NAME));
    let err = rel_err(&gpu.download(&out).unwrap(), &reference::add(&wide(&x), &wide(&y)));
    assert!(err <= tolerance::<T>(), "add<{}> {ctx}: rel err {err:.2e}", T::NAME);
    let mut out = poisoned::<T>(gpu, shape);
    vector::swiglu(gpu, &dx, &dy, &mut out).unwrap_or_else(|e| panic!("swiglu<{}> {ctx}: {e}", T::NAME));
    let err = rel_err(&gpu.download(&out).unwrap(), &reference::swiglu(&wide(&x), &wide(&y)));
    assert!(err <= tolerance::<T>(), "swiglu<{}> {ctx}: rel err {err:.2e}", T::NAME);
}

/// `add` and `swiglu` on flat and 2-D tensors of random sizes (empty ones included).
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn vector_ops_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("vector_ops_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..24 {
        let shape = draw(
            &mut rng,
            |r| if r.gen_bool(0.5) { vec![size0(r, 1 << 21)] } else { vec![size0(r, 3001), size0(r, 3001)] },
            |s| s.iter().product::<usize>() <= 1 << 22,
        );
        let ctx = format!("case {case}: {shape:?} (seed {seed})");
        match rng.gen_range(0..3) {
            0 => vector_case::<f32>(&gpu, &mut rng, &shape, &ctx),
            1 => vector_case::<bf16>(&gpu, &mut rng, &shape, &ctx),
            _ => vector_case::<f16>(&gpu, &mut rng, &shape, &ctx),
        }
    }
    // Operands of two shapes.
    let n = size(&mut rng, 3001);
    let (x, y, mut out) = (gpu.alloc::<f32>(&[n]).unwrap(), gpu.alloc::<f32>(&[n + 1]).unwrap(), gpu.alloc::<f32>(&[n]).unwrap());
    let ctx = format!("[{n}] with [{}] (seed {seed})", n + 1);
    assert_refused(vector::add(&gpu, &x, &y, &mut out), &format!("y has shape [{}], expected [{n}]", n + 1), &ctx);
    assert_refused(vector::swiglu(&gpu, &x, &y, &mut out), &format!("b has shape [{}], expected [{n}]", n + 1), &ctx);
}

fn softmax_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, [rows, cols]: [usize; 2], scale: f32, ctx: &str) {
    let x: Vec<T> = normal(rng, rows * cols, 0.0, scale);
    let dx = up(gpu, &x, &[rows, cols]);
    let mut y = poisoned::<T>(gpu, &[rows, cols]);
    softmax::softmax(gpu, &dx, &mut y).unwrap_or_else(|e| panic!("softmax<{}> {ctx}: {e}", T::NAME));
    // (The reference takes rows of at least one element; without any, y is empty.)
    let want = if cols == 0 { Vec::new() } else { reference::softmax(&wide(&x), cols) };
    let err = rel_err(&gpu.download(&y).unwrap(), &want);
    assert!(err <= tolerance::<T>(), "softmax<{}> {ctx}: rel err {err:.2e}", T::NAME);
}

/// Row softmax at random row counts and lengths (past the widest tile, and
/// empty), magnitudes from 10⁻⁴ to 10³.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn softmax_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("softmax_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..24 {
        let rc = draw(
            &mut rng,
            |r| [size0(r, 3001), if r.gen_ratio(1, 4) { r.gen_range(3002..=40_001) } else { size0(r, 3001) }],
            |&[rows, cols]| rows * cols <= 2_000_000,
        );
        let scale = pick(&mut rng, &[1.0, 1.0, 1.0, 1000.0, 1e-4]);
        let ctx = format!("case {case}: {rc:?} ×{scale} (seed {seed})");
        match rng.gen_range(0..3) {
            0 => softmax_case::<f32>(&gpu, &mut rng, rc, scale, &ctx),
            1 => softmax_case::<bf16>(&gpu, &mut rng, rc, scale, &ctx),
            _ => softmax_case::<f16>(&gpu, &mut rng, rc, scale, &ctx),
        }
    }
    let (rows, cols) = (size(&mut rng, 3001), size(&mut rng, 3001));
    let ctx = format!("{rows}×{cols} (seed {seed})");
    let (x, flat) = (gpu.alloc::<f32>(&[rows, cols]).unwrap(), gpu.alloc::<f32>(&[rows * cols]).unwrap());
    let mut y = gpu.alloc::<f32>(&[rows, cols + 1]).unwrap();
    assert_refused(softmax::softmax(&gpu, &x, &mut y), &format!("expected [{rows}, {cols}]"), &ctx);
    assert_refused(softmax::softmax(&gpu, &flat, &mut y), "must be 2-D", &ctx);
}

fn norm_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, [rows, cols]: [usize; 2], offset: f32, bias: bool, ctx: &str) {
    let ctx = format!("<{}> {ctx}", T::NAME);
    let x: Vec<T> = normal(rng, rows * cols, offset, 1.0);
    let w: Vec<T> = normal(rng, cols, 1.0, 0.5);
    let b: Vec<T> = normal(rng, cols, 0.0, 0.5);
    let (dx, dw, db) = (up(gpu, &x, &[rows, cols]), up(gpu, &w, &[cols]), up(gpu, &b, &[cols]));
    // x − mean loses |offset| ulps of f32 to the rounding of the mean itself (as in gpu_ops.rs).
    let tol = tolerance::<T>() + 4.0 * offset.abs() as f64 * f32::EPSILON as f64;
    let (want, want_mean, want_rstd) = reference::layer_norm(&wide(&x), cols, &wide(&w), bias.then(|| wide(&b)).as_deref(), 1e-5);
    let mut y = poisoned::<T>(gpu, &[rows, cols]);
    let (mut mean, mut rstd) = (poisoned::<f32>(gpu, &[rows]), poisoned::<f32>(gpu, &[rows]));
    norm::layer_norm(gpu, &dx, &dw, bias.then_some(&db), 1e-5, &mut y, &mut mean, &mut rstd).unwrap_or_else(|e| panic!("layer_norm{ctx}: {e}"));
    let err = rel_err(&gpu.download(&y).unwrap(), &want);
    assert!(err <= tol, "layer_norm{ctx}: y rel err {err:.2e}");
    assert!(mean_err(&gpu.download(&mean).unwrap(), &want_mean, &want_rstd) < 1e-5, "layer_norm{ctx}: mean");
    assert!(rel_err(&gpu.download(&rstd).unwrap(), &want_rstd) < 1e-4, "layer_norm{ctx}: rstd");
    if offset == 0.0 {
        let (want, want_rstd) = reference::rms_norm(&wide(&x), cols, &wide(&w), 1e-6);
        let (mut y, mut rstd) = (poisoned::<T>(gpu, &[rows, cols]), poisoned::<f32>(gpu, &[rows]));
        norm::rms_norm(gpu, &dx, &dw, 1e-6, &mut y, &mut rstd).unwrap_or_else(|e| panic!("rms_norm{ctx}: {e}"));
        let err = rel_err(&gpu.download(&y).unwrap(), &want);
        assert!(err <= tol, "rms_norm{ctx}: y rel err {err:.2e}");
        assert!(rel_err(&gpu.download(&rstd).unwrap(), &want_rstd) < 1e-4, "rms_norm{ctx}: rstd");
    }
}

/// LayerNorm and RMSNorm at random shapes (no rows included), with and
/// without bias, some with a common offset; rows of no elements refused.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn norms_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("norms_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..24 {
        let rc = draw(
            &mut rng,
            |r| [size0(r, 3001), if r.gen_ratio(1, 4) { r.gen_range(3002..=20_000) } else { size(r, 3001) }],
            |&[rows, cols]| rows * cols <= 2_000_000,
        );
        let (offset, bias) = (pick(&mut rng, &[0.0, 0.0, 0.0, 100.0]), rng.gen_bool(0.5));
        let ctx = format!("case {case}: {rc:?} offset={offset} bias={bias} (seed {seed})");
        match rng.gen_range(0..3) {
            0 => norm_case::<f32>(&gpu, &mut rng, rc, offset, bias, &ctx),
            1 => norm_case::<bf16>(&gpu, &mut rng, rc, offset, bias, &ctx),
            _ => norm_case::<f16>(&gpu, &mut rng, rc, offset, bias, &ctx),
        }
    }
    // Rows of no elements have no statistics; no rows at all is nothing to do.
    for rows in [size(&mut rng, 3001), 0] {
        let ctx = format!("{rows}×0 (seed {seed})");
        let (x, w, mut y) = (gpu.alloc::<f32>(&[rows, 0]).unwrap(), gpu.alloc::<f32>(&[0]).unwrap(), gpu.alloc::<f32>(&[rows, 0]).unwrap());
        let (mut mean, mut rstd) = (poisoned::<f32>(&gpu, &[rows]), poisoned::<f32>(&gpu, &[rows]));
        let ln = norm::layer_norm(&gpu, &x, &w, None, 1e-5, &mut y, &mut mean, &mut rstd);
        let rms = norm::rms_norm(&gpu, &x, &w, 1e-6, &mut y, &mut rstd);
        if rows == 0 {
            assert!(ln.is_ok() && rms.is_ok(), "{ctx}: {ln:?} {rms:?}");
        } else {
            assert_refused(ln, "cols must be at least 1", &format!("layer_norm {ctx}"));
            assert_refused(rms, "cols must be at least 1", &format!("rms_norm {ctx}"));
        }
    }
    let (rows, cols) = (size(&mut rng, 3001), size(&mut rng, 3001));
    let (x, w) = (gpu.alloc::<f32>(&[rows, cols]).unwrap(), gpu.alloc::<f32>(&[cols + 1]).unwrap());
    let (mut y, mut rstd) = (gpu.alloc::<f32>(&[rows, cols]).unwrap(), gpu.alloc::<f32>(&[rows]).unwrap());
    let ctx = format!("{rows}×{cols}, w of {} (seed {seed})", cols + 1);
    assert_refused(norm::rms_norm(&gpu, &x, &w, 1e-6, &mut y, &mut rstd), &format!("w has shape [{}], expected [{cols}]", cols + 1), &ctx);
}

// ---- the GEMM family ---------------------------------------------------------------------

/// A fuzzed GEMM `c = epilogue(op(a)·op(b))`: its sizes (any of them 0),
/// layout, batching (c `[m, n]`, or `[batch, m, n]` with a and b each
/// batched or shared), epilogue, the logical operands (a `[na, m, k]`, b
/// `[nb, n, k]`) and the float64 result.
struct GemmCase<T> {
    mnk: [usize; 3],
    batch: usize,
    batched: bool,
    /// a stored `[k, m]` (used as `a.t()`); b stored `[n, k]` (used as `b.t()`).
    ta: bool,
    tb: bool,
    a_batched: bool,
    b_batched: bool,
    epi: Epi,
    a: Vec<T>,
    b: Vec<T>,
    bias_m: Vec<T>,
    bias_n: Vec<T>,
    res: Vec<T>,
    old: Vec<T>,
    want: Vec<f64>,
}

impl<T: Elem> GemmCase<T> {
    /// A case of sizes up to `max`.
    fn draw(rng: &mut StdRng, max: usize) -> GemmCase<T> {
        let ([m, n, k], batched, batch) = draw(
            rng,
            |r| {
                let batched = r.gen_bool(0.5);
                ([size0(r, max), size0(r, max), size0(r, max)], batched, if batched { size0(r, 5) } else { 1 })
            },
            |&([m, n, k], _, batch)| batch * m * n * k <= WORK && batch * (m * k + n * k + m * n) <= 8_000_000,
        );
        let (ta, tb) = (rng.gen_bool(0.5), rng.gen_bool(0.5));
        let (a_batched, b_batched) = (batched && rng.gen_bool(0.5), batched && rng.gen_bool(0.5));
        let (alpha, beta, bias, act, residual) = draw_epi(rng);
        let epi = Epi { alpha, beta, bias, act, residual };
        let (na, nb) = (if a_batched { batch } else { 1 }, if b_batched { batch } else { 1 });
        // b's scale keeps f16 products in range at any k.
        let a: Vec<T> = normal(rng, na * m * k, 0.0, 1.0);
        let b: Vec<T> = normal(rng, nb * n * k, 0.0, 1.0 / (k.max(1) as f32).sqrt());
        let (bias_m, bias_n): (Vec<T>, Vec<T>) = (normal(rng, m, 0.0, 1.0), normal(rng, n, 0.0, 1.0));
        let (res, old): (Vec<T>, Vec<T>) = (normal(rng, batch * m * n, 0.0, 1.0), normal(rng, batch * m * n, 0.0, 1.0));
        let (wa, wb) = (wide(&a), wide(&b));
        let mut want = Vec::with_capacity(batch * m * n);
        for z in 0..batch {
            let (za, zb) = (if a_batched { z } else { 0 }, if b_batched { z } else { 0 });
            let ab = reference::matmul_nt(&wa[za * m * k..][..m * k], &wb[zb * n * k..][..n * k], m, n, k);
            want.extend(ab.iter().enumerate().map(|(i, &x)| {
                let at = z * m * n + i;
                let bv = match bias {
                    Bias::None => 0.0,
                    Bias::PerColumn => bias_n[i % n].to_f32() as f64,
                    Bias::PerRow => bias_m[i / n].to_f32() as f64,
                };
                let rv = if residual { res[at].to_f32() as f64 } else { 0.0 };
                reference::epilogue(&epi, x, bv, rv, old[at].to_f32() as f64)
            }));
        }
        GemmCase { mnk: [m, n, k], batch, batched, ta, tb, a_batched, b_batched, epi, a, b, bias_m, bias_n, res, old, want }
    }

    /// `[rows, cols]`, with c's batch in front where `lead`.
    fn shape(&self, lead: bool, rows: usize, cols: usize) -> Vec<usize> {
        if lead { vec![self.batch, rows, cols] } else { vec![rows, cols] }
    }

    /// a as stored, and its shape: `[m, k]`, or `[k, m]` when transposed.
    fn a_stored(&self) -> (Vec<T>, Vec<usize>) {
        let ([m, _, k], na) = (self.mnk, if self.a_batched { self.batch } else { 1 });
        let shape = if self.ta { self.shape(self.a_batched, k, m) } else { self.shape(self.a_batched, m, k) };
        (stored(&self.a, na, m, k, self.ta), shape)
    }

    /// b as stored, and its shape: `[n, k]` (used as `b.t()`), or `[k, n]`.
    fn b_stored(&self) -> (Vec<T>, Vec<usize>) {
        let ([_, n, k], nb) = (self.mnk, if self.b_batched { self.batch } else { 1 });
        let shape = if self.tb { self.shape(self.b_batched, n, k) } else { self.shape(self.b_batched, k, n) };
        (stored(&self.b, nb, n, k, !self.tb), shape)
    }

    fn c_shape(&self) -> Vec<usize> {
        self.shape(self.batched, self.mnk[0], self.mnk[1])
    }
}

impl<T> std::fmt::Display for GemmCase<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [m, n, k] = self.mnk;
        let t = |on: bool| if on { "ᵀ" } else { "" };
        let b = |on: bool| if on { " batched" } else { "" };
        let batch = if self.batched { format!("{}×", self.batch) } else { String::new() };
        write!(f, "{batch}{m}×{n}×{k} a{}{} b{}{} {:?}", t(self.ta), b(self.a_batched), t(self.tb), b(self.b_batched), self.epi)
    }
}

/// A [`GemmCase`] through `gemm` (or `gemm_nt` / `gemm_nt_fused` where it
/// is their 2-D `a·bᵀ`), and, where `k ≤ 256`, through `gemm_cast` into
/// f32 with an output scale and amax drawn at random. (f32 outputs are
/// checked at f32's tolerance, which an f32 sum of k products meets only
/// for k of a few hundred: its rounding grows as √k·2⁻²⁴.)
fn gemm_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let case = GemmCase::<T>::draw(rng, 3001);
    let ctx = format!("<{}> {ctx}: {case}", T::NAME);
    let ([m, n, k], e, c_shape) = (case.mnk, case.epi, case.c_shape());
    let ((a, a_shape), (b, b_shape)) = (case.a_stored(), case.b_stored());
    let (da, db) = (up(gpu, &a, &a_shape), up(gpu, &b, &b_shape));
    let am: Mat<T> = if case.ta { da.t() } else { (&da).into() };
    let bm: Mat<T> = if case.tb { db.t() } else { (&db).into() };
    let (dbias_m, dbias_n, dres) = (up(gpu, &case.bias_m, &[m]), up(gpu, &case.bias_n, &[n]), up(gpu, &case.res, &c_shape));
    let mut epi = Epilogue::new().scale(e.alpha).accumulate(e.beta).act(e.act);
    epi = match e.bias {
        Bias::PerColumn => epi.bias_per_column(&dbias_n),
        Bias::PerRow => epi.bias_per_row(&dbias_m),
        Bias::None => epi,
    };
    if e.residual {
        epi = epi.residual(&dres);
    }
    assert_eq!(epi.epi(), e, "{ctx}: the epilogue built");

    let mut c = if e.beta != 0.0 { up(gpu, &case.old, &c_shape) } else { poisoned::<T>(gpu, &c_shape) };
    let (api, run) = if !case.batched && !case.ta && case.tb && rng.gen_bool(0.5) {
        if e == Epi::NONE {
            ("gemm_nt", gemm::gemm_nt(gpu, &da, &db, &mut c))
        } else {
            ("gemm_nt_fused", gemm::gemm_nt_fused(gpu, &da, &db, &mut c, &epi))
        }
    } else {
        ("gemm", gemm::gemm(gpu, am, bm, &mut c, &epi))
    };
    run.unwrap_or_else(|err| panic!("{api}{ctx}: {err}"));
    assert_close(&gpu.download(&c).unwrap(), &case.want, &format!("{api}{ctx}"));

    if k <= 256 {
        let old32: Vec<f32> = case.old.iter().map(|v| v.to_f32()).collect();
        let mut c32 = if e.beta != 0.0 { up(gpu, &old32, &c_shape) } else { poisoned::<f32>(gpu, &c_shape) };
        let s = pick(rng, &[None, Some(0.5f32), Some(3.0)]);
        let ds = s.map(|s| up(gpu, &[s], &[1]));
        let mut amax = rng.gen_bool(0.5).then(|| up(gpu, &[0.0f32], &[1]));
        let ctx = format!("gemm_cast{ctx} → f32 scale {s:?} amax={}", amax.is_some());
        gemm::gemm_cast(gpu, am, bm, &mut c32, &epi, Cast { scale: ds.as_ref(), amax: amax.as_mut() }).unwrap_or_else(|err| panic!("{ctx}: {err}"));
        let scaled: Vec<f64> = case.want.iter().map(|v| s.unwrap_or(1.0) as f64 * v).collect();
        assert_close(&gpu.download(&c32).unwrap(), &scaled, &ctx);
        if let Some(amax) = &amax {
            let got = gpu.download(amax).unwrap()[0];
            let (top, ok) = testing::amax_matches(got, &case.want, 1e-5);
            assert!(ok, "{ctx}: amax {got} instead of {top}");
        }
    }
}

/// `gemm` (and `gemm_nt`, `gemm_nt_fused`, `gemm_cast` to f32) at random
/// sizes (0 in any dimension included: k = 0 is the epilogue of zeros), in
/// all four layouts, 2-D or batched with each operand batched or shared,
/// with random fused epilogues; then what it refuses.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("gemm_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..40 {
        let ctx = format!(" case {case} (seed {seed})");
        if rng.gen_bool(0.5) {
            gemm_case::<bf16>(&gpu, &mut rng, &ctx);
        } else {
            gemm_case::<f16>(&gpu, &mut rng, &ctx);
        }
    }
    let [m, n, k] = [0; 3].map(|_| size(&mut rng, 3001));
    let ctx = format!("{m}×{n}×{k} (seed {seed})");
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let (a, b, mut c) = (t(&[m, k]), t(&[n, k]), t(&[m, n]));
    let plain = Epilogue::new();
    assert_refused(gemm::gemm(&gpu, &a, t(&[n, k + 1]).t(), &mut c, &plain), "inner dimensions", &ctx);
    assert_refused(gemm::gemm(&gpu, &a, b.t(), &mut t(&[m, n + 1]), &plain), &format!("c must be [{m}, {n}]"), &ctx);
    assert_refused(gemm::gemm(&gpu, &t(&[3, m, k]), b.t(), &mut t(&[2, m, n]), &plain), "3-D with c's batch of 2", &ctx);
    let long = t(&[n + 1]);
    let bias = format!("bias has shape [{}], expected [{n}]", n + 1);
    assert_refused(gemm::gemm(&gpu, &a, b.t(), &mut c, &Epilogue::new().bias_per_column(&long)), &bias, &ctx);
    let res = t(&[m, n + 1]);
    let residual = format!("residual has shape [{m}, {}], expected [{m}, {n}]", n + 1);
    assert_refused(gemm::gemm(&gpu, &a, b.t(), &mut c, &Epilogue::new().residual(&res)), &residual, &ctx);
}

fn dual_gemm_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let [m, n, k] = draw(rng, |r| [size0(r, 3001), size0(r, 3001), size0(r, 3001)], |&[m, n, k]| 2 * m * n * k <= WORK && m * k + 2 * n * k <= 8_000_000);
    let ctx = format!("dual_gemm<{}> {ctx}: {m}×{n}×{k}", T::NAME);
    let scale = 1.0 / (k.max(1) as f32).sqrt();
    let (a, b1, b2): (Vec<T>, Vec<T>, Vec<T>) = (normal(rng, m * k, 0.0, 1.0), normal(rng, n * k, 0.0, scale), normal(rng, n * k, 0.0, scale));
    let (da, db1, db2) = (up(gpu, &a, &[m, k]), up(gpu, &b1, &[n, k]), up(gpu, &b2, &[n, k]));
    let wa = wide(&a);
    let want = reference::swiglu(&reference::matmul_nt(&wa, &wide(&b1), m, n, k), &reference::matmul_nt(&wa, &wide(&b2), m, n, k));
    let mut c = poisoned::<T>(gpu, &[m, n]);
    dual_gemm::dual_gemm(gpu, &da, &db1, &db2, &mut c).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(&gpu.download(&c).unwrap(), &want, &ctx);
}

/// The dual GEMM `silu(a·b1ᵀ) ⊙ a·b2ᵀ` at random sizes (0 included), and
/// what it refuses.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn dual_gemm_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("dual_gemm_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..20 {
        let ctx = format!("case {case} (seed {seed})");
        if rng.gen_bool(0.5) {
            dual_gemm_case::<bf16>(&gpu, &mut rng, &ctx);
        } else {
            dual_gemm_case::<f16>(&gpu, &mut rng, &ctx);
        }
    }
    let [m, n, k] = [0; 3].map(|_| size(&mut rng, 3001));
    let ctx = format!("{m}×{n}×{k} (seed {seed})");
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let (a, b, mut c) = (t(&[m, k]), t(&[n, k]), t(&[m, n]));
    assert_refused(dual_gemm::dual_gemm(&gpu, &a, &b, &t(&[n + 1, k]), &mut c), "the two weights must match", &ctx);
    assert_refused(dual_gemm::dual_gemm(&gpu, &a, &t(&[n, k + 1]), &t(&[n, k + 1]), &mut c), "inner dimensions differ", &ctx);
}

fn mlp_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let [rows, d_model, d_ff] =
        draw(rng, |r| [size0(r, 3001), size0(r, 2053), size0(r, 3001)], |&[r, d, f]| 3 * r * d * f <= WORK && r * d + 3 * d * f + r * f <= 8_000_000);
    let (gated, act) = (rng.gen_bool(0.5), pick(rng, &ACTS));
    let ctx = format!("<{}> {ctx}: {rows} rows, {d_model} → {d_ff} → {d_model}", T::NAME);
    let x: Vec<T> = normal(rng, rows * d_model, 0.0, 1.0);
    let w: Vec<Vec<T>> = (0..2).map(|_| normal(rng, d_ff * d_model, 0.0, 1.0 / (d_model.max(1) as f32).sqrt())).collect();
    let w2: Vec<T> = normal(rng, d_model * d_ff, 0.0, 1.0 / (d_ff.max(1) as f32).sqrt());
    let (dx, dw2) = (up(gpu, &x, &[rows, d_model]), up(gpu, &w2, &[d_model, d_ff]));
    let dw: Vec<Tensor<T>> = w.iter().map(|w| up(gpu, w, &[d_ff, d_model])).collect();
    let wx = wide(&x);
    let pre = reference::matmul_nt(&wx, &wide(&w[0]), rows, d_ff, d_model);
    // The hidden activations are stored in T between the two GEMMs.
    let (hidden, what): (Vec<f64>, String) = if gated {
        let upp = reference::matmul_nt(&wx, &wide(&w[1]), rows, d_ff, d_model);
        (reference::swiglu(&pre, &upp).into_iter().map(round::<T>).collect(), format!("gated_mlp{ctx}"))
    } else {
        let e = Epi { act, ..Epi::NONE };
        (pre.iter().map(|&v| round::<T>(reference::epilogue(&e, v, 0.0, 0.0, 0.0))).collect(), format!("mlp {act:?}{ctx}"))
    };
    let want = reference::matmul_nt(&hidden, &wide(&w2), rows, d_model, d_ff);
    let mut y = poisoned::<T>(gpu, &[rows, d_model]);
    let run = if gated { mlp::gated_mlp(gpu, &dx, &dw[0], &dw[1], &dw2, &mut y) } else { mlp::mlp(gpu, &dx, &dw[0], act, &dw2, &mut y) };
    run.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_close(&gpu.download(&y).unwrap(), &want, &what);
}

/// `mlp` (every activation) and `gated_mlp` at random sizes (0 rows,
/// features or hidden units included), and what they refuse.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn mlps_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("mlps_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..14 {
        let ctx = format!(" case {case} (seed {seed})");
        if rng.gen_bool(0.5) {
            mlp_case::<bf16>(&gpu, &mut rng, &ctx);
        } else {
            mlp_case::<f16>(&gpu, &mut rng, &ctx);
        }
    }
    let [rows, d, f] = [0; 3].map(|_| size(&mut rng, 3001));
    let ctx = format!("{rows} rows, {d} → {f} (seed {seed})");
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let (x, w1, w2, mut y) = (t(&[rows, d]), t(&[f, d]), t(&[d, f]), t(&[rows, d]));
    assert_refused(mlp::gated_mlp(&gpu, &x, &w1, &t(&[f + 1, d]), &w2, &mut y), "the input weights differ", &ctx);
    assert_refused(mlp::mlp(&gpu, &x, &w1, Act::Relu, &t(&[d, f + 1]), &mut y), &format!("expected [d_model, d_ff] = [{d}, {f}]"), &ctx);
}

/// `shared_input`: `y[:, g, :] = act(x·w[g]ᵀ + bias[g])`, one GEMM.
fn shared_input_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let [rows, g, n, k] = draw(
        rng,
        |r| [size0(r, 2053), if r.gen_ratio(1, 10) { 0 } else { r.gen_range(1..=12) }, size0(r, 700), size0(r, 1021)],
        |&[rows, g, n, k]| rows * g * n * k <= WORK && rows * k + g * n * k + rows * g * n <= 8_000_000,
    );
    let (act, bias) = (pick(rng, &ACTS), rng.gen_bool(0.5));
    let ctx = format!("shared_input<{}> {ctx}: x [{rows}, {k}], w [{g}, {n}, {k}] {act:?} bias={bias}", T::NAME);
    let x: Vec<T> = normal(rng, rows * k, 0.0, 1.0);
    let w: Vec<T> = normal(rng, g * n * k, 0.0, 1.0 / (k.max(1) as f32).sqrt());
    let b: Vec<T> = normal(rng, g * n, 0.0, 0.5);
    let (dx, dw, db) = (up(gpu, &x, &[rows, k]), up(gpu, &w, &[g, n, k]), up(gpu, &b, &[g, n]));
    let epi = if bias { Epilogue::new().bias_per_column(&db) } else { Epilogue::new() }.act(act);
    let e = epi.epi();
    let want: Vec<f64> = reference::matmul_nt(&wide(&x), &wide(&w), rows, g * n, k)
        .iter()
        .enumerate()
        .map(|(i, &v)| reference::epilogue(&e, v, if bias { b[i % (g * n)].to_f32() as f64 } else { 0.0 }, 0.0, 0.0))
        .collect();
    let mut y = poisoned::<T>(gpu, &[rows, g, n]);
    grouped_gemm::shared_input(gpu, &dx, &dw, &mut y, &epi).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(&gpu.download(&y).unwrap(), &want, &ctx);
}

/// `heads_mlp`: G heads' `act(x·w1[g]ᵀ + b1[g])·w2[g]ᵀ + b2[g]`, biases optional.
fn heads_mlp_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let dims = draw(
        rng,
        |r| [size0(r, 2053), size0(r, 700), if r.gen_ratio(1, 10) { 0 } else { r.gen_range(1..=12) }, size0(r, 1500), size0(r, 31)],
        |&[rows, d, g, h, out]| rows * g * h * (d + out) <= WORK && rows * d + g * h * (d + out) + rows * g * (h + out) <= 8_000_000,
    );
    let [rows, d, g, h, out] = dims;
    let (act, b1_on, b2_on) = (pick(rng, &ACTS), rng.gen_bool(0.5), rng.gen_bool(0.5));
    let ctx = format!("heads_mlp<{}> {ctx}: {dims:?} (rows, d, G, h, out) {act:?} b1={b1_on} b2={b2_on}", T::NAME);
    let [x, w1, b1, w2, b2] = testing::heads_inputs::<T>(rng, dims);
    let (dx, dw1, db1) = (up(gpu, &x, &[rows, d]), up(gpu, &w1, &[g, h, d]), up(gpu, &b1, &[g, h]));
    let (dw2, db2) = (up(gpu, &w2, &[g, out, h]), up(gpu, &b2, &[g, out]));
    // A bias left out is a bias of zeros.
    let (b1w, b2w) = (if b1_on { wide(&b1) } else { vec![0.0; g * h] }, if b2_on { wide(&b2) } else { vec![0.0; g * out] });
    let want = reference::heads_mlp(&wide(&x), &wide(&w1), &b1w, act, &wide(&w2), &b2w, dims, round::<T>);
    let mut y = poisoned::<T>(gpu, &[rows, g, out]);
    grouped_gemm::heads_mlp(gpu, &dx, &dw1, b1_on.then_some(&db1), act, &dw2, b2_on.then_some(&db2), &mut y).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(&gpu.download(&y).unwrap(), &want, &ctx);
}

/// `gemm_groups`: up to 8 groups of random `[m, n, k]` (any of them 0) packed back to back.
fn gemm_groups_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    use grouped_gemm::{gemm_groups, packed_offsets, Groups};
    let sizes = draw(
        rng,
        |r| (0..r.gen_range(0..=8)).map(|_| [size0(r, 2053), size0(r, 2053), size0(r, 1021)]).collect::<Vec<[usize; 3]>>(),
        |s| s.iter().map(|&[m, n, k]| m * n * k).sum::<usize>() <= WORK && packed_offsets(s)[s.len()].iter().sum::<usize>() <= 8_000_000,
    );
    let ctx = format!("gemm_groups<{}> {ctx}: {sizes:?}", T::NAME);
    let at = packed_offsets(&sizes);
    let [la, lb, lc] = at[sizes.len()];
    let (a, b): (Vec<T>, Vec<T>) = (normal(rng, la, 0.0, 1.0), normal(rng, lb, 0.0, 1.0));
    let (wa, wb) = (wide(&a), wide(&b));
    let mut want = Vec::with_capacity(lc);
    for (&[m, n, k], &[oa, ob, _]) in sizes.iter().zip(&at) {
        want.extend(reference::matmul_nt(&wa[oa..oa + m * k], &wb[ob..ob + n * k], m, n, k));
    }
    let (da, db) = (up(gpu, &a, &[la]), up(gpu, &b, &[lb]));
    let groups = Groups::new(gpu, &sizes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut c = poisoned::<T>(gpu, &[lc]);
    gemm_groups(gpu, &groups, &da, &db, &mut c).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(&gpu.download(&c).unwrap(), &want, &ctx);
}

/// The grouped GEMMs at random sizes: heads on one input (`shared_input`,
/// `heads_mlp`) and groups of different sizes (`Groups`, `gemm_groups`);
/// then what they refuse.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn grouped_gemms_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("grouped_gemms_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..24 {
        let ctx = format!("case {case} (seed {seed})");
        match (case % 3, rng.gen_bool(0.5)) {
            (0, false) => shared_input_case::<bf16>(&gpu, &mut rng, &ctx),
            (0, true) => shared_input_case::<f16>(&gpu, &mut rng, &ctx),
            (1, false) => heads_mlp_case::<bf16>(&gpu, &mut rng, &ctx),
            (1, true) => heads_mlp_case::<f16>(&gpu, &mut rng, &ctx),
            (_, false) => gemm_groups_case::<bf16>(&gpu, &mut rng, &ctx),
            (_, true) => gemm_groups_case::<f16>(&gpu, &mut rng, &ctx),
        }
    }
    let [rows, g, n, k] = [size(&mut rng, 3001), rng.gen_range(1..=12), size(&mut rng, 700), size(&mut rng, 1021)];
    let ctx = format!("x [{rows}, {k}], w [{g}, {n}, {k}] (seed {seed})");
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let (x, w) = (t(&[rows, k]), t(&[g, n, k]));
    let plain = Epilogue::new();
    assert_refused(grouped_gemm::shared_input(&gpu, &x, &t(&[g, n, k + 1]), &mut t(&[rows, g, n]), &plain), &format!("w must be [G, n, {k}]"), &ctx);
    assert_refused(grouped_gemm::shared_input(&gpu, &x, &w, &mut t(&[rows, g * n]), &plain), &format!("expected [{rows}, {g}, {n}]"), &ctx);
    let sizes = [[size(&mut rng, 700), size(&mut rng, 700), size(&mut rng, 700)]];
    let groups = grouped_gemm::Groups::new(&gpu, &sizes).unwrap();
    let [la, lb, lc] = groups.lens();
    let ctx = format!("gemm_groups {sizes:?} (seed {seed})");
    assert_refused(grouped_gemm::gemm_groups(&gpu, &groups, &t(&[la]), &t(&[lb]), &mut t(&[lc - 1])), &format!("c must hold its groups' {lc} elements"), &ctx);
}

/// One FP8 GEMM: random sizes (`k` a multiple of 16 up to 1024, 0
/// included), scales of each kind, and a random fused epilogue. (Longer
/// sums are left out: Hopper's FP8 tensor cores accumulate with fewer bits
/// than f32, so the error grows with `k` toward bf16's tolerance.)
fn fp8_case<TA: Elem, TB: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    use gemm_fp8::Scale;
    let [m, n, k] = draw(rng, |r| [size0(r, 3001), size0(r, 3001), 16 * size0(r, 64)], |&[m, n, k]| m * n * k <= WORK);
    let (alpha, beta, bias, act, residual) = draw_epi(rng);
    // A's and B's scales: 0 none, 1 one for the tensor, 2 one a row.
    let (ka, kb) = (rng.gen_range(0..3), rng.gen_range(0..3));
    let ctx = format!("gemm_fp8<{} × {}> {ctx}: {m}×{n}×{k} scales {ka}/{kb} α={alpha} β={beta} {bias:?} {act:?} residual={residual}", TA::NAME, TB::NAME);
    let (a, b): (Vec<TA>, Vec<TB>) = (normal(rng, m * k, 0.0, 2.0), normal(rng, n * k, 0.0, 2.0));
    let scales = |rng: &mut StdRng, kind: usize, rows: usize| -> Vec<f32> {
        match kind {
            0 => vec![],
            1 => normal(rng, 1, 1.0, 0.5),
            _ => normal(rng, rows, 1.0, 0.5),
        }
    };
    let (sa, sb) = (scales(rng, ka, m), scales(rng, kb, n));
    let (bias_m, bias_n): (Vec<bf16>, Vec<bf16>) = (normal(rng, m, 0.0, 3.0), normal(rng, n, 0.0, 3.0));
    let (res, old): (Vec<bf16>, Vec<bf16>) = (normal(rng, m * n, 0.0, 2.0), normal(rng, m * n, 0.0, 2.0));
    let (da, db) = (up(gpu, &a, &[m, k]), up(gpu, &b, &[n, k]));
    let (dsa, dsb) = (up(gpu, &sa, &[sa.len()]), up(gpu, &sb, &[sb.len()]));
    fn scale(kind: usize, t: &Tensor<f32>) -> Scale<'_> {
        match kind {
            0 => Scale::None,
            1 => Scale::Tensor(t),
            _ => Scale::Rows(t),
        }
    }
    let (dbias_m, dbias_n, dres) = (up(gpu, &bias_m, &[m]), up(gpu, &bias_n, &[n]), up(gpu, &res, &[m, n]));
    let mut epi = Epilogue::new().scale(alpha).accumulate(beta).act(act);
    epi = match bias {
        Bias::PerColumn => epi.bias_per_column(&dbias_n),
        Bias::PerRow => epi.bias_per_row(&dbias_m),
        Bias::None => epi,
    };
    if residual {
        epi = epi.residual(&dres);
    }
    let e = epi.epi();
    let at = |s: &[f32], i: usize| if s.is_empty() { 1.0 } else { s[if s.len() == 1 { 0 } else { i }] as f64 };
    let ab = reference::matmul_nt(&wide(&a), &wide(&b), m, n, k);
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            let bv = match bias {
                Bias::None => 0.0,
                Bias::PerColumn => bias_n[c].to_f32() as f64,
                Bias::PerRow => bias_m[r].to_f32() as f64,
            };
            let rv = if residual { res[i].to_f32() as f64 } else { 0.0 };
            reference::epilogue(&e, ab[i] * at(&sa, r) * at(&sb, c), bv, rv, old[i].to_f32() as f64)
        })
        .collect();
    let mut c = if beta != 0.0 { up(gpu, &old, &[m, n]) } else { poisoned::<bf16>(gpu, &[m, n]) };
    gemm_fp8::gemm_fp8(gpu, &da, &db, &mut c, scale(ka, &dsa), scale(kb, &dsb), &epi).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(&gpu.download(&c).unwrap(), &want, &ctx);
}

/// The FP8 GEMM (Hopper) at random sizes in both formats and their mixes,
/// and its rule: `k` a multiple of 16.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn gemm_fp8_at_random_shapes() {
    let Some(gpu) = hopper_or_skip("gemm_fp8_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..20 {
        let ctx = format!("case {case} (seed {seed})");
        match rng.gen_range(0..4) {
            0 => fp8_case::<F8E4M3, F8E4M3>(&gpu, &mut rng, &ctx),
            1 => fp8_case::<F8E5M2, F8E5M2>(&gpu, &mut rng, &ctx),
            2 => fp8_case::<F8E5M2, F8E4M3>(&gpu, &mut rng, &ctx),
            _ => fp8_case::<F8E4M3, F8E5M2>(&gpu, &mut rng, &ctx),
        }
    }
    for _ in 0..3 {
        let (m, n, k) = (size(&mut rng, 3001), size(&mut rng, 3001), 16 * rng.gen_range(0..64) + rng.gen_range(1..16));
        let (a, b, mut c) = (gpu.alloc::<F8E4M3>(&[m, k]).unwrap(), gpu.alloc::<F8E5M2>(&[n, k]).unwrap(), gpu.alloc::<bf16>(&[m, n]).unwrap());
        let none = gemm_fp8::Scale::None;
        let run = gemm_fp8::gemm_fp8(&gpu, &a, &b, &mut c, none, none, &Epilogue::new());
        assert_refused(run, &format!("k = {k} is not a multiple of 16"), &format!("gemm_fp8 {m}×{n}×{k} (seed {seed})"));
    }
}

// ---- attention ---------------------------------------------------------------------------

/// A sequence length: 0 at times, 1, small primes, or uniform up to 700.
fn length(rng: &mut StdRng) -> usize {
    size0(rng, 700)
}

/// Heads, key/value heads (a divisor) and head dim: mostly 64, 72, 96 or
/// 128, else any multiple of 8 up to 128 (what the API takes).
fn draw_heads(rng: &mut StdRng) -> [usize; 3] {
    let heads = rng.gen_range(1..=8);
    let divisors: Vec<usize> = (1..=heads).filter(|g| heads % g == 0).collect();
    let d = if rng.gen_bool(0.75) { pick(rng, &[64, 72, 96, 128]) } else { 8 * rng.gen_range(1..=16) };
    [heads, pick(rng, &divisors), d]
}

/// A softmax scale other than `1/√d` one time in four: for the forward
/// any in 0.02..0.5; for the backward at most `1/√d`. (A larger one makes
/// P nearly one-hot, where `dS = P ⊙ (dP − rowsum(dO ⊙ O))` cancels to a
/// tiny gradient whose error is the rounding of the 16-bit O the backward
/// is given, not the kernels': the float64 reference cannot tell them
/// apart: at scale 0.34 and d = 128 the interpreter's dq was off by 2.4
/// times its norm.)
fn draw_scale(rng: &mut StdRng, d: usize, backward: bool) -> Option<f32> {
    let most = if backward { 1.0 / (d as f32).sqrt() } else { 0.5 };
    rng.gen_ratio(1, 4).then(|| rng.gen_range(0.02..=most))
}

/// A fixed-length problem (`batch·heads·sq·sk·d ≤ work`) and its options:
/// causal or not, a given scale at times ([`draw_scale`]), and at times
/// only the first `keys` keys.
fn draw_attention(rng: &mut StdRng, work: usize, backward: bool) -> (attention::Dims, attention::Attention) {
    draw(
        rng,
        |r| {
            let [heads, kv_heads, d] = draw_heads(r);
            let (batch, sq, sk) = (if r.gen_ratio(1, 12) { 0 } else { r.gen_range(1..=3) }, length(r), length(r));
            let opt = attention::Attention {
                causal: r.gen_bool(0.5),
                scale: draw_scale(r, d, backward),
                keys: r.gen_ratio(1, 4).then(|| r.gen_range(0..=sk)),
                config: None,
            };
            (attention::Dims { batch, sq, sk, heads, kv_heads, d }, opt)
        },
        |(d, _)| d.batch * d.heads * d.sq * d.sk * d.d <= work,
    )
}

/// Sequences of a variable-length batch (none at times), each of random
/// query and key lengths (0 included), and its heads, within `work`.
fn draw_varlen(rng: &mut StdRng, work: usize) -> (Vec<usize>, Vec<usize>, [usize; 3]) {
    draw(
        rng,
        |r| {
            let seqs = if r.gen_ratio(1, 12) { 0 } else { r.gen_range(1..=6) };
            let (q, k): (Vec<usize>, Vec<usize>) = (0..seqs).map(|_| (length(r), length(r))).unzip();
            (q, k, draw_heads(r))
        },
        |(q, k, [heads, _, d])| q.iter().zip(k).map(|(q, k)| q * k).sum::<usize>() * heads * d <= work,
    )
}

fn attention_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let (dims, opt) = draw_attention(rng, WORK / 5, false);
    // On Hopper, half the time one of the forward's configs for the head dim (the tuned table may pick any).
    let configs = attention::attention_fwd_wgmma_kernel::CONFIGS;
    let fits: Vec<usize> = match configs.iter().filter_map(|c| c.get("D")).filter(|&dp| dp >= dims.d).min() {
        Some(dp) if attention::attention_fwd_wgmma_kernel::supported(gpu) => (0..configs.len()).filter(|&i| configs[i].get("D") == Some(dp)).collect(),
        _ => vec![],
    };
    let opt = if !fits.is_empty() && rng.gen_bool(0.5) { opt.config(fits[rng.gen_range(0..fits.len())]) } else { opt };
    let attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let ctx = format!("attention<{}> {ctx}: {dims:?} {opt:?}", T::NAME);
    let q: Vec<T> = normal(rng, batch * sq * heads * d, 0.0, 1.0);
    let mut k: Vec<T> = normal(rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let mut v: Vec<T> = normal(rng, batch * sk * kv_heads * d, 0.0, 1.0);
    // Rows past `keys` are not the problem's: NaN there must not reach the output.
    let row = kv_heads * d;
    for (z, i) in (0..batch).flat_map(|z| (opt.keys.unwrap_or(sk)..sk).map(move |i| (z, i))) {
        for x in [&mut k, &mut v] {
            x[(z * sk + i) * row..][..row].fill(T::from_f32(f32::NAN));
        }
    }
    let (dq, dk, dv) = (up(gpu, &q, &[batch, sq, heads, d]), up(gpu, &k, &[batch, sk, kv_heads, d]), up(gpu, &v, &[batch, sk, kv_heads, d]));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &[batch, sq, heads, d]), poisoned::<f32>(gpu, &[batch, heads, sq]));
    attention::attention(gpu, &dq, &dk, &dv, &mut o, &mut lse, opt).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let want = testing::attention_want(&q, &k, &v, dims, opt);
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    assert_attention_close(&o, &lse, |z, h, i| (z * heads + h) * sq + i, want, &ctx);
}

fn attention_varlen_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let (q_lens, k_lens, [heads, kv_heads, d]) = draw_varlen(rng, WORK / 5);
    let opt = attention::Attention { causal: rng.gen_bool(0.5), scale: draw_scale(rng, d, false), keys: None, config: None };
    let ctx = format!("attention_varlen<{}> {ctx}: {q_lens:?} / {k_lens:?} heads {heads}/{kv_heads} d {d} {opt:?}", T::NAME);
    let (tq, tk): (usize, usize) = (q_lens.iter().sum(), k_lens.iter().sum());
    let q: Vec<T> = normal(rng, tq * heads * d, 0.0, 1.0);
    let k: Vec<T> = normal(rng, tk * kv_heads * d, 0.0, 1.0);
    let v: Vec<T> = normal(rng, tk * kv_heads * d, 0.0, 1.0);
    let seqs = attention::SeqLens::new(gpu, &q_lens, &k_lens).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let (dq, dk, dv) = (up(gpu, &q, &[tq, heads, d]), up(gpu, &k, &[tk, kv_heads, d]), up(gpu, &v, &[tk, kv_heads, d]));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &[tq, heads, d]), poisoned::<f32>(gpu, &[heads, tq]));
    attention::attention_varlen(gpu, &dq, &dk, &dv, &seqs, &mut o, &mut lse, opt).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let at = testing::packed_seqs(&q_lens, &k_lens);
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let want = reference::attention(&wide(&q), &wide(&k), &wide(&v), &at, [heads, kv_heads, d], scale, opt.causal);
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    assert_varlen_close(&o, &lse, want, &at, [heads, d], &ctx);
}

/// A variable-length batch's `o` and `lse` (`[heads, tokens]`) against
/// `reference::attention`'s, each sequence as the problem of its own that
/// it is: the zero output of a sequence whose queries see no key must not
/// shrink the scale the other sequences' errors are measured against.
fn assert_varlen_close<T: Elem>(o: &[T], lse: &[f32], want: (Vec<f64>, Vec<Vec<Vec<f64>>>), at: &[(usize, usize, usize, usize)], [heads, d]: [usize; 2], ctx: &str) {
    let (want_o, want_lse) = want;
    let tq = lse.len() / heads.max(1);
    for (z, (&(q0, lq, _, _), lse_z)) in at.iter().zip(want_lse).enumerate() {
        let rows = q0 * heads * d..(q0 + lq) * heads * d;
        let want = (want_o[rows.clone()].to_vec(), vec![lse_z]);
        assert_attention_close(&o[rows], lse, |_, h, i| h * tq + q0 + i, want, &format!("{ctx}: sequence {z}"));
    }
}

/// The attention forward at random sizes: fixed and variable lengths (to
/// 700, 0 included), causal or not, `keys`, GQA/MQA, every head dim the
/// API takes; then the head dims and options it refuses.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn attention_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("attention_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..30 {
        let ctx = format!("case {case} (seed {seed})");
        match (case % 4 == 3, rng.gen_bool(0.5)) {
            (false, false) => attention_case::<bf16>(&gpu, &mut rng, &ctx),
            (false, true) => attention_case::<f16>(&gpu, &mut rng, &ctx),
            (true, false) => attention_varlen_case::<bf16>(&gpu, &mut rng, &ctx),
            (true, true) => attention_varlen_case::<f16>(&gpu, &mut rng, &ctx),
        }
    }
    let (sq, sk) = (size(&mut rng, 700), size(&mut rng, 700));
    let t = |shape: &[usize]| gpu.alloc::<bf16>(shape).unwrap();
    let mut lse = gpu.alloc::<f32>(&[1, 4, sq]).unwrap();
    for _ in 0..4 {
        let d = draw(&mut rng, |r| r.gen_range(0..=300usize), |&d| d == 0 || d % 8 != 0 || d > 128);
        let (q, k, mut o) = (t(&[1, sq, 4, d]), t(&[1, sk, 2, d]), t(&[1, sq, 4, d]));
        let run = attention::attention(&gpu, &q, &k, &k, &mut o, &mut lse, attention::Attention::default());
        assert_refused(run, &format!("head dim {d} is not supported; it must be a multiple of 8 up to 128"), &format!("attention d {d} (seed {seed})"));
    }
    let (q, k, mut o) = (t(&[1, sq, 4, 64]), t(&[1, sk, 3, 64]), t(&[1, sq, 4, 64]));
    let ctx = format!("attention sq {sq} sk {sk} (seed {seed})");
    assert_refused(attention::attention(&gpu, &q, &k, &k, &mut o, &mut lse, attention::Attention::default()), "multiple of kv_heads", &ctx);
    let k = t(&[1, sk, 2, 64]);
    let too_many = attention::Attention::default().keys(sk + 1);
    assert_refused(attention::attention(&gpu, &q, &k, &k, &mut o, &mut lse, too_many), &format!("keys = {}, but k and v hold {sk}", sk + 1), &ctx);
}

/// `[dq, dk, dv]` against float64 at twice the forward's tolerance (P and dS pass through 16 bits).
fn assert_grads_close<T: Elem>(gpu: &Gpu, got: [&Tensor<T>; 3], want: [Vec<f64>; 3], ctx: &str) {
    for ((name, got), want) in ["dq", "dk", "dv"].into_iter().zip(got).zip(want) {
        let err = rel_err(&gpu.download(got).unwrap(), &want);
        assert!(err <= 2.0 * tolerance::<T>(), "{ctx}: {name} rel err {err:.2e}");
    }
}

fn attention_backward_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let (dims, opt) = draw_attention(rng, WORK / 10, true);
    let attention::Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let ctx = format!("attention_backward<{}> {ctx}: {dims:?} {opt:?}", T::NAME);
    let (qs, ks) = ([batch, sq, heads, d], [batch, sk, kv_heads, d]);
    let q: Vec<T> = normal(rng, qs.iter().product(), 0.0, 1.0);
    let k: Vec<T> = normal(rng, ks.iter().product(), 0.0, 1.0);
    let v: Vec<T> = normal(rng, ks.iter().product(), 0.0, 1.0);
    let d_o: Vec<T> = normal(rng, qs.iter().product(), 0.0, 1.0);
    let (tq, tk, tv, tdo) = (up(gpu, &q, &qs), up(gpu, &k, &ks), up(gpu, &v, &ks), up(gpu, &d_o, &qs));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &qs), poisoned::<f32>(gpu, &[batch, heads, sq]));
    attention::attention(gpu, &tq, &tk, &tv, &mut o, &mut lse, opt).unwrap_or_else(|e| panic!("{ctx}: forward: {e}"));
    let (mut dq, mut dk, mut dv) = (poisoned::<T>(gpu, &qs), poisoned::<T>(gpu, &ks), poisoned::<T>(gpu, &ks));
    attention::attention_backward(gpu, [&tq, &tk, &tv, &o, &tdo], &lse, [&mut dq, &mut dk, &mut dv], opt).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let keys = opt.keys.unwrap_or(sk);
    let seqs: Vec<_> = (0..batch).map(|z| (z * sq, sq, z * sk, keys)).collect();
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let want = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, [heads, kv_heads, d], scale, opt.causal);
    // Key rows past `keys` are in the comparison: their gradient is zero.
    assert_grads_close(gpu, [&dq, &dk, &dv], want, &ctx);
}

fn attention_varlen_backward_case<T: Elem>(gpu: &Gpu, rng: &mut StdRng, ctx: &str) {
    let (q_lens, k_lens, [heads, kv_heads, d]) = draw_varlen(rng, WORK / 10);
    let opt = attention::Attention { causal: rng.gen_bool(0.5), scale: draw_scale(rng, d, true), keys: None, config: None };
    let ctx = format!("attention_varlen_backward<{}> {ctx}: {q_lens:?} / {k_lens:?} heads {heads}/{kv_heads} d {d} {opt:?}", T::NAME);
    let (tq, tk): (usize, usize) = (q_lens.iter().sum(), k_lens.iter().sum());
    let (qs, ks) = ([tq, heads, d], [tk, kv_heads, d]);
    let q: Vec<T> = normal(rng, tq * heads * d, 0.0, 1.0);
    let k: Vec<T> = normal(rng, tk * kv_heads * d, 0.0, 1.0);
    let v: Vec<T> = normal(rng, tk * kv_heads * d, 0.0, 1.0);
    let d_o: Vec<T> = normal(rng, tq * heads * d, 0.0, 1.0);
    let seqs = attention::SeqLens::new(gpu, &q_lens, &k_lens).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let (tq_, tk_, tv_, tdo) = (up(gpu, &q, &qs), up(gpu, &k, &ks), up(gpu, &v, &ks), up(gpu, &d_o, &qs));
    let (mut o, mut lse) = (poisoned::<T>(gpu, &qs), poisoned::<f32>(gpu, &[heads, tq]));
    attention::attention_varlen(gpu, &tq_, &tk_, &tv_, &seqs, &mut o, &mut lse, opt).unwrap_or_else(|e| panic!("{ctx}: forward: {e}"));
    let (mut dq, mut dk, mut dv) = (poisoned::<T>(gpu, &qs), poisoned::<T>(gpu, &ks), poisoned::<T>(gpu, &ks));
    attention::attention_varlen_backward(gpu, [&tq_, &tk_, &tv_, &o, &tdo], &lse, &seqs, [&mut dq, &mut dk, &mut dv], opt)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let at = testing::packed_seqs(&q_lens, &k_lens);
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let want = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &at, [heads, kv_heads, d], scale, opt.causal);
    assert_grads_close(gpu, [&dq, &dk, &dv], want, &ctx);
}

/// The attention backward at random sizes: fixed and variable lengths (0
/// included), causal or not, `keys`, GQA/MQA, every head dim the API takes.
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn attention_backward_at_random_shapes() {
    let Some(gpu) = gpu_or_skip("attention_backward_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..20 {
        let ctx = format!("case {case} (seed {seed})");
        match (case % 4 == 3, rng.gen_bool(0.5)) {
            (false, false) => attention_backward_case::<bf16>(&gpu, &mut rng, &ctx),
            (false, true) => attention_backward_case::<f16>(&gpu, &mut rng, &ctx),
            (true, false) => attention_varlen_backward_case::<bf16>(&gpu, &mut rng, &ctx),
            (true, true) => attention_varlen_backward_case::<f16>(&gpu, &mut rng, &ctx),
        }
    }
}

// ---- TriMul ------------------------------------------------------------------------------

/// TriMul (`forward` and `forward_into` a poisoned output) at random sizes
/// within its limits: N to 64 (0 included), dim to 1024, hidden 64 to 128,
/// x normal or Cauchy, masked or not, elementwise at GPU MODE's rtol = atol
/// = 2e-2 (the whole output up to 3·10⁵ values, past that 8 sampled
/// pairs); then the sizes it refuses. (Hidden sizes below 64 are left out:
/// over few channels the output LayerNorm amplifies the bf16
/// intermediates' rounding past that bound, as `ops/src/trimul/tests.rs`
/// records at hidden 40. Even so the bound is tight: over about 750 such
/// cases in the interpreter, which rounds the same intermediates, the worst
/// element of a case was typically 0.4-0.9 of it, and in 3 cases 1.03-1.11.)
#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn trimul_at_random_shapes() {
    use testing::{assert_allclose, TriMulCase};
    use trimul::{Dims, Params, TriMul};
    let Some(gpu) = gpu_or_skip("trimul_at_random_shapes") else { return };
    let (mut rng, seed) = rng();
    for case in 0..10 {
        let dims = draw(
            &mut rng,
            |r| Dims {
                batch: if r.gen_ratio(1, 10) { 0 } else { r.gen_range(1..=2) },
                n: size0(r, 64),
                dim: size(r, 1024),
                hidden: if r.gen_bool(0.5) { 128 } else { r.gen_range(64..=128) },
            },
            |d| d.batch * d.n * d.n * d.dim <= 2_000_000,
        );
        let Dims { batch, n, dim, .. } = dims;
        let (cauchy, masked) = (rng.gen_bool(0.5), rng.gen_bool(0.5));
        let ctx = format!("trimul case {case}: {dims:?} cauchy={cauchy} mask={masked} (seed {seed})");
        let tc = TriMulCase::new(&mut rng, dims, cauchy, masked);
        let (tm, x, mask) = tc.upload(&gpu).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let mut ws = tm.workspace(&gpu, batch, n).unwrap();
        let mut out = poisoned::<f32>(&gpu, &[batch, n, n, dim]);
        tm.forward_into(&gpu, &x, mask.as_ref(), &mut ws, &mut out).unwrap_or_else(|e| panic!("{ctx}: forward_into: {e}"));
        let fresh = tm.forward(&gpu, &x, mask.as_ref()).unwrap_or_else(|e| panic!("{ctx}: forward: {e}"));
        assert_eq!(fresh.shape(), [batch, n, n, dim], "{ctx}: forward's output");
        let outs = [("forward_into", gpu.download(&out).unwrap()), ("forward", gpu.download(&fresh).unwrap())];
        if batch * n == 0 {
            assert!(outs.iter().all(|(_, o)| o.is_empty()), "{ctx}: an empty update has an empty output");
        } else if batch * n * n * dim <= 300_000 {
            let want = tc.want();
            for (what, got) in &outs {
                assert_allclose(got, &want, 2e-2, 2e-2, &format!("{ctx} {what}"));
            }
        } else {
            let at = tc.sample_pairs(&mut rng, 4);
            let want = tc.want_at(&at);
            for (what, got) in &outs {
                assert_allclose(&tc.rows_at(got, &at), &want, 2e-2, 2e-2, &format!("{ctx} {what} at {at:?}"));
            }
        }
    }
    // The kernels' limits (checked before the parameters are read).
    let one = gpu.alloc::<f32>(&[1]).unwrap();
    let params = Params::from_fields([&one; 10]);
    let most = trimul::max_hidden();
    let hidden = rng.gen_range(most + 1..=4 * most);
    let refused = |dim: usize, hidden: usize| TriMul::new(&gpu, &params, dim, hidden).map(|_| ());
    let ctx = format!("(seed {seed})");
    assert_refused(refused(128, hidden), &format!("hidden = {hidden} is over the {most} channels"), &format!("hidden {hidden} {ctx}"));
    let dim = rng.gen_range(1025..=8192);
    assert_refused(refused(dim, 128), &format!("dim = {dim} is over the 1024"), &format!("dim {dim} {ctx}"));
    assert_refused(refused(0, 128), "must be at least 1", &format!("dim 0 {ctx}"));
    assert_refused(refused(128, 0), "must be at least 1", &format!("hidden 0 {ctx}"));
    // x of another width than the update's.
    let tc = TriMulCase::new(&mut rng, Dims { batch: 1, n: 3, dim: 16, hidden: 64 }, false, false);
    let (tm, _, _) = tc.upload(&gpu).unwrap();
    let x = gpu.alloc::<f32>(&[1, 3, 3, 17]).unwrap();
    assert_refused(tm.forward(&gpu, &x, None).map(|_| ()), "expected [batch, n, n, 16]", &ctx);
}
