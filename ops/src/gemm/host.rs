//! The host API of the GEMM: shapes and layouts checked into a [`Plan`],
//! the config chosen (tuned table, else `default_config`), the launch.
//! Host-only: editing it changes no kernel and leaves tuned tables current.
use super::*;
use crate::check::{expect_shape, matrix};
use rustile_host::{Error, Gpu, Result, Tensor, TileMap};

pub(crate) fn check_dtype<T: Elem>(op: &str) -> Result<()> {
    if !matches!(T::KIND, Kind::Bf16 | Kind::F16) {
        return Err(Error::DType(format!("{op} takes bf16 or f16 operands, not {}", T::NAME)));
    }
    Ok(())
}

/// `(m, n, k)` of `c = a·bᵀ` for 2-D row-major `a` `[m, k]`, `b` `[n, k]`
/// and `c` `[m, n]` (of its own element type: FP8 in, bf16 out), or an
/// error naming what does not fit.
pub(crate) fn gemm_shape<TA: Elem, TB: Elem, C: Elem>(a: &Tensor<TA>, b: &Tensor<TB>, c: &Tensor<C>) -> Result<(usize, usize, usize)> {
    let (m, k) = matrix("a", a)?;
    let (n, kb) = matrix("b", b)?;
    if kb != k {
        return Err(Error::Shape(format!("a is [{m}, {k}] and b is [{n}, {kb}]: their inner dimensions differ")));
    }
    expect_shape("c", c, &[m, n])?;
    Ok((m, n, k))
}

/// A GEMM operand: a tensor used as stored, or transposed (`w.t()`), in
/// the way `x @ w.T` reads in PyTorch. A 3-D tensor is a batch of
/// matrices; a 2-D one is shared by every matrix of a batched product.
#[derive(Clone, Copy)]
pub struct Mat<'a, T> {
    tensor: &'a Tensor<T>,
    transposed: bool,
}

impl<'a, T> From<&'a Tensor<T>> for Mat<'a, T> {
    fn from(tensor: &'a Tensor<T>) -> Self {
        Mat { tensor, transposed: false }
    }
}

/// `t.t()`: the transpose of a (batch of) matrices, as a GEMM operand.
pub trait Transpose<T> {
    fn t(&self) -> Mat<'_, T>;
}
impl<T> Transpose<T> for Tensor<T> {
    fn t(&self) -> Mat<'_, T> {
        Mat { tensor: self, transposed: true }
    }
}

/// Everything a `gemm_*_kernel` launch takes besides the tensors: the
/// operands as strided views, so that ops built on the GEMM (grouped
/// heads, padded hidden layers) can launch it on parts of tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    /// Row strides of A, B and C (the residual has C's layout).
    pub ld: [usize; 3],
    /// Batch strides of A, B, C and the bias (0: shared by the batch).
    pub stride: [usize; 4],
    /// A stored `[k, m]`; B stored `[n, k]` (the kernels' `TA`, `TB`).
    pub ta: bool,
    pub tb: bool,
}

impl Plan {
    /// One row-major `C = A·Bᵀ`: A `[m, k]`, B `[n, k]`, C `[m, n]`.
    pub fn nt(m: usize, n: usize, k: usize) -> Plan {
        Plan { m, n, k, batch: 1, ld: [k, k, n], stride: [0; 4], ta: false, tb: true }
    }

    /// Whether the copy engine can read A and B (`Config::Tma`): each row
    /// and batch stride a multiple of 16 bytes.
    pub fn tma_ready(&self) -> bool {
        let [lda, ldb, _] = self.ld;
        [lda, ldb, self.stride[0], self.stride[1]].iter().all(|s| s % 8 == 0)
    }

    /// The tensor maps of A and B for a `gemm_tma_kernel` config (device
    /// addresses; built once per tensor and box, `rustile_host::TileMap`).
    fn tma_maps<T: Elem>(&self, gpu: &Gpu, cfg: usize, a: &Tensor<T>, b: &Tensor<T>) -> Result<[u64; 2]> {
        let [bm, bn] = block_shape("gemm_tma_kernel", gemm_tma_kernel::CONFIGS, cfg)?;
        let map = |t: &Tensor<T>, rows: usize, ld: usize, stride: usize, box_rows: usize| {
            let batch = if stride == 0 { 1 } else { self.batch };
            tma_map(gpu, t, [self.k, rows, batch], [ld, if stride == 0 { ld * rows } else { stride }], box_rows)
        };
        Ok([map(a, self.m, self.ld[0], self.stride[0], bm)?, map(b, self.n, self.ld[1], self.stride[1], bn)?])
    }

    /// Every element the plan reads or writes lies inside its tensor
    /// (given their lengths), or an error naming the first that does not.
    pub fn check(&self, epi: Epi, [a, b, c, bias, residual]: [usize; 5]) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        // (what, rows, cols, row stride, batch stride, length)
        let a_dims = if self.ta { (k, m) } else { (m, k) };
        let b_dims = if self.tb { (n, k) } else { (k, n) };
        let mut views = vec![
            ("a", a_dims.0, a_dims.1, self.ld[0], self.stride[0], a),
            ("b", b_dims.0, b_dims.1, self.ld[1], self.stride[1], b),
            ("c", m, n, self.ld[2], self.stride[2], c),
        ];
        match epi.bias {
            Bias::PerColumn => views.push(("bias", 1, n, n, self.stride[3], bias)),
            Bias::PerRow => views.push(("bias", 1, m, m, self.stride[3], bias)),
            Bias::None => {}
        }
        if epi.residual {
            views.push(("residual", m, n, self.ld[2], self.stride[2], residual));
        }
        for (what, rows, cols, ld, stride, len) in views {
            if rows == 0 || cols == 0 || self.batch == 0 {
                continue;
            }
            let end = (self.batch - 1) * stride + (rows - 1) * ld + cols;
            if ld < cols || end > len {
                return Err(Error::Shape(format!(
                    "gemm: {what} as {} matrices of {rows}×{cols} (row stride {ld}, batch stride {stride}) needs {end} elements; it has {len}",
                    self.batch
                )));
            }
        }
        Ok(())
    }
}

/// The block (`[BM, BN]`) of config `cfg` of a GEMM-family kernel (a TMA
/// kernel's box heights, a grouped kernel's blocks), or the launcher's error
/// for a config that does not exist (before any map or table is built).
pub(crate) fn block_shape(kernel: &str, configs: &[rustile::KernelConfig], cfg: usize) -> Result<[usize; 2]> {
    let c = configs.get(cfg).ok_or_else(|| Error::Launch { kernel: kernel.into(), msg: format!("config {cfg} does not exist (there are {})", configs.len()) })?;
    Ok(["BM", "BN"].map(|p| c.get(p).expect("every GEMM-family config names BM and BN")))
}

/// The tensor map (device address) of `batch` matrices of `rows×k` in
/// `t`, rows `ld` and matrices `stride` elements apart, read in boxes of
/// `box_rows` rows of 128 bytes by the Hopper kernels' copy engine.
/// An operand without elements has no map (0; the driver refuses empty
/// dimensions), and no program reads one: `k = 0` is no k-steps, and no
/// rows or no matrices launch no programs.
pub(crate) fn tma_map<T: Elem>(gpu: &Gpu, t: &Tensor<T>, [k, rows, batch]: [usize; 3], [ld, stride]: [usize; 2], box_rows: usize) -> Result<u64> {
    if k == 0 || rows == 0 || batch == 0 {
        return Ok(0);
    }
    let bytes = core::mem::size_of::<T>() as u64;
    gpu.tensor_map(&TileMap {
        base: t.device_ptr(),
        dims: [k as u64, rows as u64, batch as u64],
        strides: [bytes * ld as u64, bytes * stride as u64],
        boxes: [128 / bytes as u32, box_rows as u32, 1],
        elem_bytes: bytes as u32,
    })
}

/// The [`Plan`] of `c = op(a)·op(b)`: `c` is `[m, n]` or `[batch, m, n]`,
/// `op(a)` `[m, k]` and `op(b)` `[k, n]`, each 2-D or with c's batch.
fn plan<T: Elem, C: Elem>(a: Mat<T>, b: Mat<T>, c: &Tensor<C>) -> Result<Plan> {
    expect_shape("c", c, c.shape())?;
    expect_shape("a", a.tensor, a.tensor.shape())?;
    expect_shape("b", b.tensor, b.tensor.shape())?;
    plan_shapes((a.tensor.shape(), a.transposed), (b.tensor.shape(), b.transposed), c.shape())
}

/// [`plan`] from the shapes as stored (and whether each operand is transposed).
pub(crate) fn plan_shapes((a, ta): (&[usize], bool), (b, tb): (&[usize], bool), c: &[usize]) -> Result<Plan> {
    let (batch, m, n) = match *c {
        [m, n] => (1, m, n),
        [batch, m, n] => (batch, m, n),
        _ => return Err(Error::Shape(format!("c must be [m, n] or [batch, m, n]; it has shape {c:?}"))),
    };
    // (rows, cols) as stored, and the batch stride (0: shared).
    let stored = |what: &str, shape: &[usize]| match *shape {
        [r, c] => Ok((r, c, 0)),
        [bt, r, c] if bt == batch => Ok((r, c, r * c)),
        _ => Err(Error::Shape(format!("{what} has shape {shape:?}: expected 2-D, or 3-D with c's batch of {batch}"))),
    };
    let (ar, ac, sa) = stored("a", a)?;
    let (br, bc, sb) = stored("b", b)?;
    let ((am, ak), (bk, bn)) = (if ta { (ac, ar) } else { (ar, ac) }, if tb { (bc, br) } else { (br, bc) });
    if am != m || bn != n || ak != bk {
        let t = |x: bool| if x { "ᵀ" } else { "" };
        return Err(Error::Shape(format!(
            "a{} is [{am}, {ak}] and b{} is [{bk}, {bn}]: c must be [{am}, {bn}] and the inner dimensions equal; c is [{m}, {n}]",
            t(ta),
            t(tb)
        )));
    }
    Ok(Plan { m, n, k: ak, batch, ld: [ac, bc, n], stride: [sa, sb, m * n, 0], ta, tb })
}

/// A GEMM kernel and one of its configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// Index into `gemm_nt_kernel::CONFIGS`, shared by the four
    /// `gemm_{nt,nn,tn,tt}_kernel`s (`mma.sync`, sm_80 and up).
    Mma(usize),
    /// Index into `gemm_wgmma_kernel::CONFIGS` (Hopper, sm_90a; A `[m, k]`
    /// and B `[n, k]` only).
    Wgmma(usize),
    /// Index into `gemm_tma_kernel::CONFIGS`: the wgmma kernel fed by the
    /// copy engine (Hopper; A `[m, k]`, B `[n, k]`, rows and batch strides
    /// multiples of 8 elements).
    Tma(usize),
}

impl From<usize> for Config {
    fn from(cfg: usize) -> Config {
        Config::Mma(cfg)
    }
}

/// The config a plan runs where none is given: on Hopper the `wgmma`
/// kernel for the layout it takes, else the `mma.sync` kernels; each from
/// its tuned table, else its default.
pub fn choose(gpu: &Gpu, p: &Plan) -> Config {
    choose_by(gpu, p, p.m)
}

/// [`choose`] for a batch of many small matrices (TriMul's contraction:
/// 128 of 1024×1024): the tables are looked up by the rows of the whole
/// batch, `batch·m`. A single small GEMM's winner trades block size for
/// parallelism (1024³ takes 64×128 blocks to fill the SMs), which the batch
/// already has: at 128 × 1024³ the 128×256 blocks take 0.46 ms, the 1024³
/// winner 1.0 (bench/RESULTS.md, 2026-11-22,
/// “TriMul on `wgmma`, two programs an SM”).
pub fn choose_batched(gpu: &Gpu, p: &Plan) -> Config {
    choose_by(gpu, p, p.m * p.batch)
}

/// [`choose`] with the tables looked up at `rows` rows.
fn choose_by(gpu: &Gpu, p: &Plan, rows: usize) -> Config {
    if !p.ta && p.tb && gemm_wgmma_kernel::supported(gpu) {
        let (cc, shape) = (gpu.compute_capability(), [rows, p.n, p.k]);
        let heuristic = || wgmma_heuristic(p.m * p.batch, p.n);
        if p.tma_ready() {
            return Config::Tma(crate::tune::config(cc, "gemm_tma", gemm_tma_kernel::CONFIGS, &shape, heuristic));
        }
        let heuristic = || if p.k <= 16 { shallow_wgmma_config() } else { heuristic() };
        return Config::Wgmma(crate::tune::config(cc, "gemm_wgmma", gemm_wgmma_kernel::CONFIGS, &shape, heuristic));
    }
    Config::Mma(mma_config_by(gpu, p, rows))
}

/// The `wgmma` heuristic's config for a product one `wgmma` deep (`k ≤ 16`:
/// a rank-3 product such as the mixture heads' input gradient), a bucket
/// the tables (tuned at depths of 512 and more) do not have: all its time
/// is loading and storing, so two programs share an SM (`OCC = 2`) and
/// one's stores overlap the other's loads. The default's 128×256 blocks,
/// one to an SM, took 2.26 ms of a small TransformerNP step that moves
/// 1.75 GB.
fn shallow_wgmma_config() -> usize {
    gemm_wgmma_kernel::CONFIGS.iter().position(|c| c.get("OCC") == Some(2)).expect("gemm_wgmma_kernel lists a config of two programs an SM")
}

/// [`default_wgmma_config`], except that an output at most 128 wide never
/// gets a 256-wide block: the grouped heads' last layer (`n` = 3) ran
/// 128×256 blocks, 85 times wider than its output, at four times the time
/// of reading its input. (The two `wgmma` kernels list their configs in the
/// same order: 1 is 128×128, 3 is 64×128.)
fn wgmma_heuristic(rows: usize, n: usize) -> usize {
    match default_wgmma_config(rows, n) {
        0 if n <= 128 => 1,
        cfg => cfg,
    }
}

/// The `mma.sync` config a plan runs on a GPU without `wgmma` (tuned, else
/// the default): every layout shares gemm_nt's config space and table.
pub fn mma_config(gpu: &Gpu, p: &Plan) -> usize {
    mma_config_by(gpu, p, p.m)
}

fn mma_config_by(gpu: &Gpu, p: &Plan, rows: usize) -> usize {
    crate::tune::config(gpu.compute_capability(), "gemm_nt", gemm_nt_kernel::CONFIGS, &[rows, p.n, p.k], || default_config(p.m * p.batch, p.n))
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
    /// The SiLU's backward: multiplies by `silu'(pre)` (`pre` `[m, n]`, the
    /// activation's saved input) instead of adding a residual, so
    /// `gemm(&gpu, &dy, &w2, &mut dh, &Epilogue::new().silu_grad(&pre))` is
    /// `dh = (dy·w2) ⊙ silu'(pre)` in one kernel.
    pub fn silu_grad(self, pre: &'a Tensor<T>) -> Self {
        Epilogue { act: Act::SiluGrad, residual: Some(pre), ..self }
    }
    /// Scales the product by `alpha` (before the bias).
    pub fn scale(self, alpha: f32) -> Self {
        Epilogue { alpha, ..self }
    }
    /// Adds `beta` times c's previous contents.
    pub fn accumulate(self, beta: f32) -> Self {
        Epilogue { beta, ..self }
    }
    /// The bias tensor, if any.
    pub fn bias(&self) -> Option<&'a Tensor<T>> {
        self.bias.map(|(_, t)| t)
    }
    /// The residual tensor, if any.
    pub fn residual_tensor(&self) -> Option<&'a Tensor<T>> {
        self.residual
    }
    /// What the kernel is told.
    pub fn epi(&self) -> Epi {
        let bias = self.bias.map_or(Bias::None, |(kind, _)| kind);
        Epi { alpha: self.alpha, beta: self.beta, bias, act: self.act, residual: self.residual.is_some() }
    }
}

/// `c = epilogue(op(a)·op(b))` on the GPU, in one kernel: `a` is
/// `[m, k]` or `x.t()` of a `[k, m]` tensor, `b` is `[k, n]` or `w.t()`
/// of an `[n, k]` weight, `c` is `[m, n]`; with a leading batch
/// dimension on `c` (and on `a` or `b`, else they are shared) it is a
/// batched product. Every dimension may be any size.
///
/// ```ignore
/// gemm(&gpu, &x, w.t(), &mut y, &Epilogue::new().bias_per_column(&bias))?; // y = x·wᵀ + bias
/// gemm(&gpu, x.t(), &dy, &mut dw, &Epilogue::new())?;                        // dw = xᵀ·dy
/// ```
pub fn gemm<'a, T: Elem>(gpu: &Gpu, a: impl Into<Mat<'a, T>>, b: impl Into<Mat<'a, T>>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
    gemm_on(gpu, None, a.into(), b.into(), c, epi, Cast::default())
}

/// [`gemm`] into an output of another type: `c = scale·epilogue(a·wᵀ)` in
/// f32, or in e4m3 from bf16 operands (saturating at ±448), with the
/// largest |epilogue(a·wᵀ)| raised into `amax` (see [`Cast`]). Every
/// layout (`a.t()`, `w` as `[k, n]`) and kernel writes it: a weight
/// gradient `dw = dyᵀ·x` in f32 is `gemm_cast(&gpu, dy.t(), &x, &mut dw32, ..)`.
///
/// ```ignore
/// // y8 = e4m3(s·gelu(x·wᵀ + b)), amax = max |gelu(x·wᵀ + b)|
/// gemm_cast(&gpu, &x, w.t(), &mut y8, &Epilogue::new().bias_per_column(&b).act(Act::GeluTanh),
///           Cast { scale: Some(&s), amax: Some(&mut amax) })?;
/// ```
pub fn gemm_cast<'a, T: Elem, C: Elem>(
    gpu: &Gpu,
    a: impl Into<Mat<'a, T>>,
    b: impl Into<Mat<'a, T>>,
    c: &mut Tensor<C>,
    epi: &Epilogue<T>,
    cast: Cast,
) -> Result<()> {
    gemm_on(gpu, None, a.into(), b.into(), c, epi, cast)
}

/// `c = a·bᵀ` on the GPU: `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]`.
pub fn gemm_nt<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
    gemm(gpu, a, b.t(), c, &Epilogue::new())
}

/// `c = act(α·a·bᵀ + bias) + residual + β·c` on the GPU, in one kernel.
pub fn gemm_nt_fused<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
    gemm(gpu, a, b.t(), c, epi)
}

/// `gemm_nt_fused` with config `cfg` (a plain index is an `mma.sync`
/// config; for tests, sweeps and the tuner).
pub fn gemm_nt_with_config<T: Elem>(gpu: &Gpu, cfg: impl Into<Config>, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
    gemm_with_config(gpu, cfg, a, b.t(), c, epi)
}

/// [`gemm`] with config `cfg`.
pub fn gemm_with_config<'a, T: Elem>(
    gpu: &Gpu,
    cfg: impl Into<Config>,
    a: impl Into<Mat<'a, T>>,
    b: impl Into<Mat<'a, T>>,
    c: &mut Tensor<T>,
    epi: &Epilogue<T>,
) -> Result<()> {
    gemm_on(gpu, Some(cfg.into()), a.into(), b.into(), c, epi, Cast::default())
}

/// [`gemm`] with config `cfg`, else the tuned one: the whole tensors' shapes
/// checked (a bias of exactly `[n]` or `[m]`, a residual of c's shape), then
/// [`launch_plan`].
fn gemm_on<T: Elem, C: Elem>(gpu: &Gpu, cfg: Option<Config>, a: Mat<T>, b: Mat<T>, c: &mut Tensor<C>, epi: &Epilogue<T>, cast: Cast) -> Result<()> {
    let p = plan(a, b, c)?;
    match epi.bias {
        Some((Bias::PerRow, t)) => expect_shape("bias", t, &[p.m])?,
        Some((_, t)) => expect_shape("bias", t, &[p.n])?,
        None => {}
    }
    if let Some(t) = epi.residual {
        expect_shape("residual", t, c.shape())?;
    }
    launch_plan_cast(gpu, cfg, &p, a.tensor, b.tensor, c, epi, cast)
}

/// Launches the GEMM kernel of `p`'s layout on views of whole tensors
/// (config `cfg`, else [`choose`]'s), after checking that every view lies
/// inside its tensor.
pub fn launch_plan<T: Elem>(gpu: &Gpu, cfg: Option<Config>, p: &Plan, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
    launch_plan_cast(gpu, cfg, p, a, b, c, epi, Cast::default())
}

/// How [`gemm_cast`] finishes its output beyond the [`Epilogue`]: C's
/// values multiplied by `scale` (a one-element device tensor: an FP8
/// output's quantization scale), and the largest |value| before that
/// raised into `amax` (one element; start it at 0, as it only grows).
#[derive(Default)]
pub struct Cast<'a> {
    pub scale: Option<&'a Tensor<f32>>,
    pub amax: Option<&'a mut Tensor<f32>>,
}

impl Cast<'_> {
    /// The scale and the amax are one element each.
    pub(crate) fn check(&self) -> Result<()> {
        for (what, t) in [("the output scale", self.scale), ("amax", self.amax.as_deref())] {
            if let Some(t) = t {
                expect_shape(what, t, &[1])?;
            }
        }
        Ok(())
    }

    /// The kernels' [`Out::flags`] bits for this cast.
    pub(crate) fn flags(&self) -> u32 {
        Out::flags(self.scale.is_some(), self.amax.is_some())
    }
}

/// The output types a GEMM of `T` operands writes: `T`, f32, and e4m3 from bf16.
fn check_out<T: Elem, C: Elem>() -> Result<()> {
    let ok = C::KIND == T::KIND || C::KIND == Kind::F32 || (T::KIND == Kind::Bf16 && C::KIND == Kind::E4M3);
    if !ok {
        return Err(Error::DType(format!("gemm of {} operands writes {}, f32 or (from bf16) e4m3, not {}", T::NAME, T::NAME, C::NAME)));
    }
    Ok(())
}

/// [`launch_plan`] with an output of its own type (the operands', f32, or
/// e4m3 from bf16) and a [`Cast`]; every kernel and layout writes them.
#[allow(clippy::too_many_arguments)]
pub fn launch_plan_cast<T: Elem, C: Elem>(
    gpu: &Gpu,
    cfg: Option<Config>,
    p: &Plan,
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &mut Tensor<C>,
    epi: &Epilogue<T>,
    cast: Cast,
) -> Result<()> {
    check_dtype::<T>("gemm")?;
    check_out::<T, C>()?;
    let e = epi.epi();
    if e.act == Act::SiluGrad && !e.residual {
        return Err(Error::Invalid("gemm: Act::SiluGrad multiplies by silu'(pre) of a saved pre-activation; give it with Epilogue::silu_grad(&pre)".into()));
    }
    // Unused operands are placeholders the kernel never reads.
    let bias = epi.bias.map_or(a, |(_, t)| t);
    let residual = epi.residual.unwrap_or(a);
    for (what, t) in [("a", a), ("b", b), ("bias", bias), ("residual", residual)] {
        if !t.is_contiguous() {
            return Err(Error::Shape(format!("gemm: {what} must be contiguous; its strides are {:?}", t.strides())));
        }
    }
    if !c.is_contiguous() {
        return Err(Error::Shape(format!("gemm: c must be contiguous; its strides are {:?}", c.strides())));
    }
    cast.check()?;
    p.check(e, [a.numel(), b.numel(), c.numel(), bias.numel(), residual.numel()])?;
    let cfg = cfg.unwrap_or_else(|| choose(gpu, p));
    let (m, n, k, batch) = (p.m, p.n, p.k, p.batch);
    let ([lda, ldb, ldc], [sa, sb, sc, sbias]) = (p.ld, p.stride);
    let flags = e.flags() | cast.flags();
    // Placeholders (no allocation) the kernel never reads.
    let (none, mut none_mut) = (gpu.alloc::<f32>(&[0])?, gpu.alloc::<f32>(&[0])?);
    let scale = cast.scale.unwrap_or(&none);
    let amax = cast.amax.unwrap_or(&mut none_mut);
    macro_rules! launch {
        ($kernel:ident, $cfg:expr $(, $maps:expr)*) => {
            $kernel::launch(gpu, $cfg, a, b, c, bias, residual, scale, amax, m, n, k, batch, lda, ldb, ldc, sa, sb, sc, sbias, e.alpha, e.beta, flags $(, $maps)*)
        };
    }
    match (cfg, p.ta, p.tb) {
        (Config::Tma(_), false, true) if !p.tma_ready() => Err(Error::Shape(format!(
            "gemm: the TMA kernel needs row and batch strides that are multiples of 8 elements; these are {:?} and {:?}",
            p.ld, p.stride
        ))),
        (Config::Tma(cfg), false, true) => {
            let [map_a, map_b] = p.tma_maps(gpu, cfg, a, b)?;
            launch!(gemm_tma_kernel, cfg, map_a, map_b)
        }
        (Config::Wgmma(cfg), false, true) => launch!(gemm_wgmma_kernel, cfg),
        (Config::Wgmma(_) | Config::Tma(_), ..) => Err(wgmma_layout()),
        (Config::Mma(cfg), false, true) => launch!(gemm_nt_kernel, cfg),
        (Config::Mma(cfg), false, false) => launch!(gemm_nn_kernel, cfg),
        (Config::Mma(cfg), true, false) => launch!(gemm_tn_kernel, cfg),
        (Config::Mma(cfg), true, true) => launch!(gemm_tt_kernel, cfg),
    }
}

/// How many parts [`gemm_split_k`] cuts `k` into for an `m×n` output on
/// `gpu`: enough 128×128 blocks for two a SM, each part at least 512 deep;
/// down to half as many where that count divides `k`. The rows a division
/// leaves over take a launch of their own, which cost 54 µs at 512×512
/// (bench/RESULTS.md, 2026-11-26, "The TransformerNP's second matrix…").
pub fn split_k_parts(gpu: &Gpu, m: usize, n: usize, k: usize) -> usize {
    let blocks = (m.div_ceil(128) * n.div_ceil(128)).max(1);
    let parts = (2 * gpu.sm_count() as usize).div_ceil(blocks).clamp(1, (k / 512).max(1));
    (parts.div_ceil(2)..=parts).rev().find(|p| k % p == 0).unwrap_or(parts)
}

/// The scratch [`gemm_split_k`] needs: `[parts, m, n]` f32.
pub fn split_k_scratch(gpu: &Gpu, m: usize, n: usize, k: usize) -> Result<Tensor<f32>> {
    gpu.alloc(&[split_k_parts(gpu, m, n, k), m, n])
}

/// `c = op(a)·op(b)` in f32 with `k` cut into [`split_k_parts`] parts: one
/// batched launch writes each part's product into `scratch`, and
/// `reduce::col_sum` adds them in a fixed order (the same bits every run).
/// For products whose output is small beside their depth, as a weight
/// gradient `dw = dyᵀ·x` (`[out, in]`, summed over every token): their
/// `m×n` blocks alone would leave most SMs idle.
///
/// ```ignore
/// let mut scratch = split_k_scratch(&gpu, 512, 512, tokens)?;
/// gemm_split_k(&gpu, dy.t(), &x, &mut dw, &mut scratch)?; // dw = dyᵀ·x
/// ```
pub fn gemm_split_k<'a, T: Elem>(gpu: &Gpu, a: impl Into<Mat<'a, T>>, b: impl Into<Mat<'a, T>>, c: &mut Tensor<f32>, scratch: &mut Tensor<f32>) -> Result<()> {
    let (a, b) = (a.into(), b.into());
    let p = plan(a, b, c)?;
    if p.batch != 1 {
        return Err(Error::Shape("gemm_split_k: a single product (2-D operands and output)".into()));
    }
    let (m, n, k) = (p.m, p.n, p.k);
    let parts = split_k_parts(gpu, m, n, k);
    if scratch.numel() < parts * m * n {
        return Err(Error::Shape(format!("gemm_split_k: scratch holds {} values; {parts}×{m}×{n} needed (split_k_scratch makes it)", scratch.numel())));
    }
    let kc = k / parts;
    // A step of kc along k: kc rows of an operand stored with k as its row index, else kc columns.
    let step = |transposed_k_rows: bool, ld: usize| if transposed_k_rows { kc * ld } else { kc };
    let (sa, sb) = (step(p.ta, p.ld[0]), step(!p.tb, p.ld[1]));
    let parts_plan = Plan { k: kc, batch: parts, ld: [p.ld[0], p.ld[1], n], stride: [sa, sb, m * n, 0], ..p };
    let mut parts_out = scratch.view(0, &[parts, m, n])?;
    // The parts were counted in 128×128 blocks; the tables and the default
    // look at one part's rows and gave 64×64 to 62 of a step's 100 launches
    // (bench/RESULTS.md, 2026-11-26, "The TransformerNP trains…").
    let blocks_128 = if parts > 1 && (p.ta || !p.tb) { Some(Config::Mma(crate::gemm::MMA_128)) } else { None };
    launch_plan_cast(gpu, blocks_128, &parts_plan, a.tensor, b.tensor, &mut parts_out, &Epilogue::new(), Cast::default())?;
    let rest = k - parts * kc;
    if rest > 0 {
        // The last rows of k go into part 0, added to what it holds.
        let (a_rest, b_rest) = (a.tensor.view(parts * sa, &[a.tensor.numel() - parts * sa])?, b.tensor.view(parts * sb, &[b.tensor.numel() - parts * sb])?);
        let mut first = scratch.view(0, &[m, n])?;
        let rest_plan = Plan { k: rest, batch: 1, stride: [0; 4], ..parts_plan };
        launch_plan_cast(gpu, None, &rest_plan, &a_rest, &b_rest, &mut first, &Epilogue::new().accumulate(1.0), Cast::default())?;
    }
    let mut flat = c.view(0, &[m * n])?;
    crate::reduce::col_sum(gpu, scratch, [parts, m * n], [m * n, 0], &mut flat)
}

fn wgmma_layout() -> Error {
    Error::Shape("gemm: the wgmma and TMA kernels take a as [m, k] and b as w.t() of an [n, k] weight; use an mma config for other layouts".into())
}

/// [`launch_plan`] in the CPU interpreter, on slices (`bias` and
/// `residual` may be empty where `epi` does not use them).
#[allow(clippy::too_many_arguments)]
pub fn launch_plan_cpu<T: Elem>(cfg: impl Into<Config>, p: &Plan, a: &[T], b: &[T], c: &mut [T], bias: &[T], residual: &[T], epi: Epi) {
    launch_plan_cast_cpu(cfg, p, [a, b, bias, residual], c, epi, &[], &mut [])
}

/// [`launch_plan_cast`] in the CPU interpreter (`scale` empty or one
/// value, `amax` empty or one value).
#[allow(clippy::too_many_arguments)]
pub fn launch_plan_cast_cpu<T: Elem, C: Elem>(
    cfg: impl Into<Config>,
    p: &Plan,
    [a, b, bias, residual]: [&[T]; 4],
    c: &mut [C],
    epi: Epi,
    scale: &[f32],
    amax: &mut [f32],
) {
    if let Err(e) = check_out::<T, C>().and_then(|_| p.check(epi, [a.len(), b.len(), c.len(), bias.len(), residual.len()])) {
        panic!("{e}");
    }
    let out_flags = Out::flags(!scale.is_empty(), !amax.is_empty());
    let cfg = cfg.into();
    let flags = epi.flags() | out_flags;
    let (m, n, k, batch) = (p.m, p.n, p.k, p.batch);
    let ([lda, ldb, ldc], [sa, sb, sc, sbias]) = (p.ld, p.stride);
    let (alpha, beta) = (epi.alpha, epi.beta);
    macro_rules! run {
        ($kernel:ident, $cfg:expr $(, $maps:expr)*) => {
            $kernel::cpu($cfg, a, b, c, bias, residual, scale, amax, m, n, k, batch, lda, ldb, ldc, sa, sb, sc, sbias, alpha, beta, flags $(, $maps)*)
        };
    }
    match (cfg, p.ta, p.tb) {
        (Config::Wgmma(cfg), false, true) => run!(gemm_wgmma_kernel, cfg),
        (Config::Tma(cfg), false, true) => run!(gemm_tma_kernel, cfg, 0, 0),
        (Config::Wgmma(_) | Config::Tma(_), ..) => panic!("{}", wgmma_layout()),
        (Config::Mma(cfg), false, true) => run!(gemm_nt_kernel, cfg),
        (Config::Mma(cfg), false, false) => run!(gemm_nn_kernel, cfg),
        (Config::Mma(cfg), true, false) => run!(gemm_tn_kernel, cfg),
        (Config::Mma(cfg), true, true) => run!(gemm_tt_kernel, cfg),
    }
}

/// `a·bᵀ` in the CPU interpreter (`a` `[m, k]`, `b` `[n, k]`, row-major).
pub fn gemm_nt_cpu<T: Elem>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
    assert_eq!(a.len(), m * k, "gemm_nt: a holds {} elements, not {m}×{k}", a.len());
    assert_eq!(b.len(), n * k, "gemm_nt: b holds {} elements, not {n}×{k}", b.len());
    let mut c = vec![T::default(); m * n];
    let e = Epi::NONE;
    launch_plan_cpu(default_config(m, n), &Plan::nt(m, n, k), a, b, &mut c, &[], &[], e);
    c
}

#[cfg(test)]
mod host_tests {
    use super::*;

    #[test]
    fn narrow_outputs_get_no_256_wide_block() {
        let bn = |configs: &[rustile::KernelConfig], cfg: usize| configs[cfg].get("BN").unwrap();
        // The grouped heads' last layer: 10 × 16384 rows, 3 outputs.
        let cfg = wgmma_heuristic(163840, 3);
        assert_eq!((bn(gemm_wgmma_kernel::CONFIGS, cfg), bn(gemm_tma_kernel::CONFIGS, cfg)), (128, 128));
        assert_eq!(bn(gemm_tma_kernel::CONFIGS, wgmma_heuristic(163840, 4096)), 256);
    }

    #[test]
    fn block_shape_names_a_missing_config() {
        assert_eq!(block_shape("gemm_tma_kernel", gemm_tma_kernel::CONFIGS, 0).unwrap(), [128, 256]);
        let n = gemm_tma_kernel::CONFIGS.len();
        match block_shape("gemm_tma_kernel", gemm_tma_kernel::CONFIGS, n) {
            Err(Error::Launch { kernel, msg }) => assert!(kernel == "gemm_tma_kernel" && msg.contains("does not exist"), "{msg}"),
            other => panic!("config {n} of {n}: {other:?}"),
        }
    }
}
