//! The host API of TriMul: [`TriMul::new`] prepares the weights once,
//! [`TriMul::forward`] runs the update on the GPU, [`trimul_cpu`] in the
//! interpreter. Host-only.
use super::*;
use crate::check::expect_shape;
use crate::gemm::{choose_batched, launch_plan, launch_plan_cpu, Config, Epi, Epilogue, Plan};
use rustile_host::{Error, Gpu, Result, Tensor};

/// The sizes of one update: `x` is `[batch, n, n, dim]`, the hidden channels `hidden`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub n: usize,
    pub dim: usize,
    pub hidden: usize,
}

/// The widest hidden size: the channels [`trimul_out_kernel`] normalizes
/// in one tile, and [`trimul_project_wgmma_kernel`] projects in one block.
pub fn max_hidden() -> usize {
    let out = trimul_out_kernel::CONFIGS.iter().map(|c| c.get("HM").unwrap());
    let project = trimul_project_wgmma_kernel::CONFIGS.iter().map(|c| c.get("BH").unwrap());
    out.chain(project).min().unwrap()
}

impl Dims {
    fn pairs(&self) -> usize {
        self.n * self.n
    }

    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.dim == 0 || self.hidden == 0 {
            return Err(format!("trimul: dim ({}) and hidden ({}) must be at least 1", self.dim, self.hidden));
        }
        let most = max_hidden();
        if self.hidden > most {
            return Err(format!("trimul: hidden = {} is over the {most} channels the kernels take in one block", self.hidden));
        }
        let dmax = trimul_project_kernel::CONFIGS.iter().map(|c| c.get("DMAX").unwrap()).max().unwrap();
        if self.dim > dmax {
            return Err(format!("trimul: dim = {} is over the {dmax} the projection kernel holds in shared memory", self.dim));
        }
        Ok(())
    }
}

/// The update's parameters, as a PyTorch module holds them (fp32). Linear
/// weights are `[out, in]`: the five projections `[hidden, dim]`, `out`
/// `[dim, hidden]`; the LayerNorms' weight and bias `[dim]` (`norm`) and
/// `[hidden]` (`out_norm`). `W` is `&Tensor<f32>` for the GPU, `&[f32]` for
/// the interpreter.
#[derive(Clone, Copy)]
pub struct Params<W> {
    pub norm_w: W,
    pub norm_b: W,
    pub left: W,
    pub left_gate: W,
    pub right: W,
    pub right_gate: W,
    pub out_gate: W,
    pub out_norm_w: W,
    pub out_norm_b: W,
    pub out: W,
}

/// The parameters' names, in field order.
pub const PARAM_NAMES: [&str; 10] = ["norm_w", "norm_b", "left", "left_gate", "right", "right_gate", "out_gate", "out_norm_w", "out_norm_b", "out"];

impl<W: Copy> Params<W> {
    /// The parameters from an array in field order ([`PARAM_NAMES`]).
    pub fn from_fields([norm_w, norm_b, left, left_gate, right, right_gate, out_gate, out_norm_w, out_norm_b, out]: [W; 10]) -> Self {
        Params { norm_w, norm_b, left, left_gate, right, right_gate, out_gate, out_norm_w, out_norm_b, out }
    }

    /// The parameters in field order.
    pub fn fields(&self) -> [W; 10] {
        let p = self;
        [p.norm_w, p.norm_b, p.left, p.left_gate, p.right, p.right_gate, p.out_gate, p.out_norm_w, p.out_norm_b, p.out]
    }

    /// Each parameter's shape, in field order.
    pub fn shapes(dim: usize, hidden: usize) -> [Vec<usize>; 10] {
        let lin = vec![hidden, dim];
        [vec![dim], vec![dim], lin.clone(), lin.clone(), lin.clone(), lin.clone(), lin, vec![hidden], vec![hidden], vec![dim, hidden]]
    }

    /// The five projections in the order the kernel stacks them.
    fn projections(&self) -> [W; 5] {
        [self.left, self.left_gate, self.right, self.right_gate, self.out_gate]
    }
}

/// One of GPU MODE's seven benchmark shapes (hidden = 128 in all).
#[derive(Clone, Copy, Debug)]
pub struct BenchShape {
    pub n: usize,
    pub batch: usize,
    pub dim: usize,
    pub masked: bool,
    /// x drawn from Cauchy(0, 2) rather than N(0, 1).
    pub cauchy: bool,
}

impl BenchShape {
    pub fn dims(&self) -> Dims {
        Dims { batch: self.batch, n: self.n, dim: self.dim, hidden: 128 }
    }
}

/// GPU MODE's `trimul` benchmark shapes, in its order.
pub const BENCH_SHAPES: [BenchShape; 7] = {
    const fn s(n: usize, batch: usize, dim: usize, masked: bool, cauchy: bool) -> BenchShape {
        BenchShape { n, batch, dim, masked, cauchy }
    }
    [s(256, 2, 128, false, false), s(768, 1, 128, false, true), s(256, 2, 384, true, false), s(512, 1, 128, false, false), s(1024, 1, 128, false, true), s(768, 1, 384, true, false), s(1024, 1, 384, false, false)]
};

/// LayerNorm's epsilon (both norms), as in AlphaFold3.
pub const EPS: f32 = 1e-5;

/// Which projection kernel runs: [`TriMul::forward`] takes the faster one
/// the GPU has ([`Projection::best`]); the other stays callable, for tests
/// and comparisons ([`TriMul::project_with`], [`trimul_cpu_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projection {
    /// [`trimul_project_kernel`]: `mma.sync`, any GPU.
    Mma,
    /// [`trimul_project_wgmma_kernel`]: `wgmma`, Hopper only.
    Wgmma,
}

impl Projection {
    /// `Wgmma` on Hopper, else `Mma`.
    pub fn best(gpu: &Gpu) -> Projection {
        if trimul_project_wgmma_kernel::supported(gpu) {
            Projection::Wgmma
        } else {
            Projection::Mma
        }
    }

    /// The config for rows of `dim`: the first whose `DMAX` holds them.
    fn config(self, dim: usize) -> usize {
        let configs = match self {
            Projection::Mma => trimul_project_kernel::CONFIGS,
            Projection::Wgmma => trimul_project_wgmma_kernel::CONFIGS,
        };
        crate::pick_config(configs, |c| c.get("DMAX").unwrap() >= dim)
    }
}

/// The output config: the narrowest `BN` that holds `dim`, else the widest.
fn out_config(dim: usize) -> usize {
    crate::pick_config(trimul_out_kernel::CONFIGS, |c| c.get("BN").unwrap() >= dim)
}

/// The contraction `t[b, d] = left[b, d]·right[b, d]ᵀ`, over `batch·hidden` matrices of `n×n`.
fn contraction(d: &Dims) -> Plan {
    let (n, pairs) = (d.n, d.pairs());
    Plan { batch: d.batch * d.hidden, stride: [pairs, pairs, pairs, 0], ..Plan::nt(n, n, n) }
}

/// The matrices one after another, converted to `T`.
fn stack<T: Elem>(parts: &[impl AsRef<[f32]>]) -> Vec<T> {
    parts.iter().flat_map(|p| p.as_ref().iter().map(|&v| T::from_f32(v))).collect()
}

/// TriMul on the GPU, its weights prepared: the five projections stacked
/// and both weight matrices in bf16 (done once, as a module would cache
/// them; [`TriMul::forward`] then runs three kernels and the GEMM).
///
/// ```ignore
/// let tm = TriMul::new(&gpu, &params, dim, hidden)?;
/// let out = tm.forward(&gpu, &x, Some(&mask))?;   // x [b, n, n, dim] fp32
/// ```
pub struct TriMul {
    dim: usize,
    hidden: usize,
    /// `[5·hidden, dim]`: W_lp, W_lg, W_rp, W_rg, W_og.
    w: Tensor<bf16>,
    /// `[dim, hidden]`.
    w_out: Tensor<bf16>,
    norm: [Tensor<f32>; 2],
    out_norm: [Tensor<f32>; 2],
}

impl TriMul {
    pub fn new(gpu: &Gpu, p: &Params<&Tensor<f32>>, dim: usize, hidden: usize) -> Result<TriMul> {
        Dims { batch: 1, n: 1, dim, hidden }.check().map_err(Error::Shape)?;
        for ((what, t), shape) in PARAM_NAMES.iter().zip(p.fields()).zip(Params::<()>::shapes(dim, hidden)) {
            expect_shape(what, t, &shape)?;
        }
        let projections = p.projections().into_iter().map(|t| gpu.download(t)).collect::<Result<Vec<_>>>()?;
        let w = gpu.upload(&stack::<bf16>(&projections), &[5 * hidden, dim])?;
        let w_out = gpu.upload(&stack::<bf16>(&[gpu.download(p.out)?]), &[dim, hidden])?;
        let copy = |t: &Tensor<f32>| -> Result<Tensor<f32>> {
            let mut own = gpu.alloc(t.shape())?;
            gpu.copy_d2d(t, &mut own)?;
            Ok(own)
        };
        Ok(TriMul {
            dim,
            hidden,
            w,
            w_out,
            norm: [copy(p.norm_w)?, copy(p.norm_b)?],
            out_norm: [copy(p.out_norm_w)?, copy(p.out_norm_b)?],
        })
    }

    /// The update of `x` (`[batch, n, n, dim]`, fp32) with an optional
    /// `mask` (`[batch, n, n]`, 0/1 or any weights): fp32 `[batch, n, n, dim]`.
    pub fn forward(&self, gpu: &Gpu, x: &Tensor<f32>, mask: Option<&Tensor<f32>>) -> Result<Tensor<f32>> {
        let d = self.dims_of(x, mask)?;
        let mut ws = self.workspace(gpu, d.batch, d.n)?;
        let mut out = gpu.alloc::<f32>(x.shape())?;
        self.forward_into(gpu, x, mask, &mut ws, &mut out)?;
        Ok(out)
    }

    /// [`TriMul::forward`] into buffers the caller keeps (`out` of `x`'s shape).
    pub fn forward_into(&self, gpu: &Gpu, x: &Tensor<f32>, mask: Option<&Tensor<f32>>, ws: &mut Workspace, out: &mut Tensor<f32>) -> Result<()> {
        self.project(gpu, x, mask, ws)?;
        self.contract(gpu, ws)?;
        self.finish(gpu, ws, out)
    }

    /// The intermediates of an update of `batch × n × n` pairs.
    pub fn workspace(&self, gpu: &Gpu, batch: usize, n: usize) -> Result<Workspace> {
        let alloc = || gpu.alloc::<bf16>(&[batch, self.hidden, n * n]);
        Ok(Workspace { dims: Dims { batch, n, dim: self.dim, hidden: self.hidden }, left: alloc()?, right: alloc()?, gate: alloc()?, t: alloc()? })
    }

    /// Step 1: LayerNorm and the five projections (`ws.left`, `ws.right`,
    /// `ws.gate`), on the GPU's faster kernel.
    pub fn project(&self, gpu: &Gpu, x: &Tensor<f32>, mask: Option<&Tensor<f32>>, ws: &mut Workspace) -> Result<()> {
        self.project_with(gpu, x, mask, ws, Projection::best(gpu))
    }

    /// [`TriMul::project`] on the kernel `how` names (`Wgmma` needs Hopper).
    pub fn project_with(&self, gpu: &Gpu, x: &Tensor<f32>, mask: Option<&Tensor<f32>>, ws: &mut Workspace, how: Projection) -> Result<()> {
        let d = self.dims_of(x, mask)?;
        if d != ws.dims {
            return Err(Error::Shape(format!("trimul: the workspace is for {:?}, x is {:?}", ws.dims, d)));
        }
        let [w, b] = &self.norm;
        let cfg = how.config(d.dim);
        let (left, right, gate) = (&mut ws.left, &mut ws.right, &mut ws.gate);
        let (batch, pairs, dim, hidden) = (d.batch, d.pairs(), d.dim, d.hidden);
        let (mask, has_mask) = (mask.unwrap_or(x), mask.is_some() as u32);
        // (`launch` of the wgmma kernel refuses a GPU that is not Hopper.)
        match how {
            Projection::Mma => trimul_project_kernel::launch(gpu, cfg, x, mask, w, b, &self.w, left, right, gate, batch, pairs, dim, hidden, EPS, has_mask),
            Projection::Wgmma => trimul_project_wgmma_kernel::launch(gpu, cfg, x, mask, w, b, &self.w, left, right, gate, batch, pairs, dim, hidden, EPS, has_mask),
        }
    }

    /// Step 2: the contraction over k, `ws.t` from `ws.left` and `ws.right`
    /// (the GEMM config [`choose_batched`] picks).
    pub fn contract(&self, gpu: &Gpu, ws: &mut Workspace) -> Result<()> {
        self.contract_with(gpu, ws, None)
    }

    /// [`TriMul::contract`] on a given GEMM config (for sweeps).
    pub fn contract_with(&self, gpu: &Gpu, ws: &mut Workspace, cfg: Option<Config>) -> Result<()> {
        let plan = contraction(&ws.dims);
        let cfg = cfg.unwrap_or_else(|| choose_batched(gpu, &plan));
        launch_plan(gpu, Some(cfg), &plan, &ws.left, &ws.right, &mut ws.t, &Epilogue::new())
    }

    /// Step 3: LayerNorm of t, the output gate and the output projection.
    pub fn finish(&self, gpu: &Gpu, ws: &Workspace, out: &mut Tensor<f32>) -> Result<()> {
        let Dims { batch, n, dim, hidden } = ws.dims;
        expect_shape("out", out, &[batch, n, n, dim])?;
        let [w, b] = &self.out_norm;
        trimul_out_kernel::launch(gpu, out_config(dim), &ws.t, &ws.gate, w, b, &self.w_out, out, batch, n * n, dim, hidden, EPS)
    }

    fn dims_of(&self, x: &Tensor<f32>, mask: Option<&Tensor<f32>>) -> Result<Dims> {
        let &[batch, n, n2, dim] = x.shape() else {
            return Err(Error::Shape(format!("trimul: x must be [batch, n, n, dim]; it has shape {:?}", x.shape())));
        };
        if n2 != n || dim != self.dim {
            return Err(Error::Shape(format!("trimul: x has shape {:?}, expected [batch, n, n, {}]", x.shape(), self.dim)));
        }
        expect_shape("x", x, &[batch, n, n, dim])?;
        if let Some(m) = mask {
            expect_shape("mask", m, &[batch, n, n])?;
        }
        Ok(Dims { batch, n, dim, hidden: self.hidden })
    }
}

/// The intermediates of [`TriMul::forward_into`], each `[batch, hidden, n·n]` bf16.
pub struct Workspace {
    dims: Dims,
    left: Tensor<bf16>,
    right: Tensor<bf16>,
    gate: Tensor<bf16>,
    t: Tensor<bf16>,
}

/// TriMul in the CPU interpreter: the same kernels and GEMM as
/// [`TriMul::forward`], on slices (`x` `[batch, n, n, dim]`, `mask`
/// `[batch, n, n]`); fp32 `[batch, n, n, dim]`.
pub fn trimul_cpu(x: &[f32], mask: Option<&[f32]>, p: &Params<&[f32]>, d: Dims) -> Vec<f32> {
    trimul_cpu_with(x, mask, p, d, Projection::Mma)
}

/// [`trimul_cpu`] with the projection kernel `how` names.
pub fn trimul_cpu_with(x: &[f32], mask: Option<&[f32]>, p: &Params<&[f32]>, d: Dims, how: Projection) -> Vec<f32> {
    d.check().unwrap_or_else(|e| panic!("{e}"));
    let (Dims { batch, dim, hidden, .. }, pairs) = (d, d.pairs());
    assert_eq!(x.len(), batch * pairs * dim, "trimul: x holds {} elements, not {batch}×{pairs}×{dim}", x.len());
    if let Some(m) = mask {
        assert_eq!(m.len(), batch * pairs, "trimul: mask holds {} elements, not {batch}×{pairs}", m.len());
    }
    let w = stack::<bf16>(&p.projections());
    let w_out = stack::<bf16>(&[p.out]);
    let parts = || vec![bf16::default(); batch * hidden * pairs];
    let (mut left, mut right, mut gate, mut t) = (parts(), parts(), parts(), parts());
    let (cfg, mask_or_x, has_mask) = (how.config(dim), mask.unwrap_or(x), mask.is_some() as u32);
    match how {
        Projection::Mma => trimul_project_kernel::cpu(
            cfg, x, mask_or_x, p.norm_w, p.norm_b, &w, &mut left, &mut right, &mut gate, batch, pairs, dim, hidden, EPS, has_mask,
        ),
        Projection::Wgmma => trimul_project_wgmma_kernel::cpu(
            cfg, x, mask_or_x, p.norm_w, p.norm_b, &w, &mut left, &mut right, &mut gate, batch, pairs, dim, hidden, EPS, has_mask,
        ),
    }
    let plan = contraction(&d);
    let cfg = Config::Mma(crate::gemm::default_config(plan.m * plan.batch, plan.n));
    launch_plan_cpu(cfg, &plan, &left, &right, &mut t, &[], &[], Epi::NONE);
    let mut out = vec![0.0; batch * pairs * dim];
    trimul_out_kernel::cpu(out_config(dim), &t, &gate, p.out_norm_w, p.out_norm_b, &w_out, &mut out, batch, pairs, dim, hidden, EPS);
    out
}
