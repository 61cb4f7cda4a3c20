//! The host API of the FP8 GEMM. Host-only: editing it changes no kernel
//! and leaves tuned tables current.
use super::*;
use crate::check::expect_shape;
use crate::gemm::{gemm_shape, block_shape, tma_map, Cast, Epilogue, Out};
use rustile_host::{Error, Gpu, Result, Tensor};

/// How an FP8 operand was quantized: `x ≈ s·q` for the stored `q`, and the
/// product is multiplied back by `s`.
#[derive(Clone, Copy)]
pub enum Scale<'a> {
    /// Stored as is.
    None,
    /// One scale for the whole operand: a one-element device tensor (so a
    /// scale computed on the GPU, e.g. from an amax, needs no sync).
    Tensor(&'a Tensor<f32>),
    /// One scale per row of the operand: `[m]` for A, `[n]` for B.
    Rows(&'a Tensor<f32>),
}

impl Scale<'_> {
    fn kind(&self) -> ScaleKind {
        match self {
            Scale::None => ScaleKind::None,
            Scale::Tensor(_) => ScaleKind::Tensor,
            Scale::Rows(_) => ScaleKind::Row,
        }
    }

    fn tensor(&self) -> Option<&Tensor<f32>> {
        match self {
            Scale::None => None,
            Scale::Tensor(t) | Scale::Rows(t) => Some(t),
        }
    }

    /// The scale's tensor has the length its kind needs (`rows` for `Rows`).
    fn check(&self, what: &str, rows: usize) -> Result<()> {
        match self {
            Scale::None => Ok(()),
            Scale::Tensor(t) => expect_shape(what, *t, &[1]),
            Scale::Rows(t) => expect_shape(what, *t, &[rows]),
        }
    }
}

/// The FP8 formats the tensor cores multiply (either for each operand),
/// and the outputs: bf16, or e4m3 from e4m3 × e4m3.
fn check_fp8<TA: Elem, TB: Elem, C: Elem>() -> Result<()> {
    for (what, kind, name) in [("a", TA::KIND, TA::NAME), ("b", TB::KIND, TB::NAME)] {
        if !matches!(kind, Kind::E4M3 | Kind::E5M2) {
            return Err(Error::DType(format!("gemm_fp8 takes e4m3 or e5m2 operands; {what} is {name}")));
        }
    }
    let e4m3 = TA::KIND == Kind::E4M3 && TB::KIND == Kind::E4M3;
    if !(C::KIND == Kind::Bf16 || (C::KIND == Kind::E4M3 && e4m3)) {
        let also = if e4m3 { " or e4m3" } else { "" };
        return Err(Error::DType(format!("gemm_fp8 of {} × {} operands writes bf16{also}, not {}", TA::NAME, TB::NAME, C::NAME)));
    }
    Ok(())
}

/// `c = epilogue(sa·sb·(a·bᵀ))` on a Hopper GPU: `a` `[m, k]` and `b`
/// `[n, k]` in FP8 (e4m3 or e5m2 each: e5m2 gradients by e4m3 weights
/// work as they are), `c` `[m, n]` bf16, `k`
/// a multiple of 16 (the copy engine reads rows of 16-byte multiples).
/// `sa`, `sb` are how `a` and `b` were scaled; the epilogue is the bf16
/// GEMM's (bias, activation, residual, α, β), applied after the scales.
///
/// ```ignore
/// let (qa, qb) = (quantize(&x)?, quantize(&w)?);          // F8E4M3 tensors and their scales
/// gemm_fp8(&gpu, &qa, &qb, &mut y, Scale::Rows(&sx), Scale::Tensor(&sw), &Epilogue::new().bias_per_column(&b))?;
/// ```
pub fn gemm_fp8<TA: Elem, TB: Elem>(gpu: &Gpu, a: &Tensor<TA>, b: &Tensor<TB>, c: &mut Tensor<bf16>, sa: Scale, sb: Scale, epi: &Epilogue<bf16>) -> Result<()> {
    gemm_fp8_cast(gpu, a, b, c, sa, sb, epi, Cast::default())
}

/// [`gemm_fp8`] into bf16 or (from e4m3 operands) e4m3, `c =
/// scale·epilogue(sa·sb·(a·bᵀ))` with its amax (see [`Cast`]): an FP8
/// layer whose output feeds the next FP8 GEMM.
///
/// ```ignore
/// gemm_fp8_cast(&gpu, &qx, &qw, &mut h8, Scale::Tensor(&sx), Scale::Tensor(&sw),
///               &Epilogue::new().act(Act::GeluTanh), Cast { scale: Some(&s_h), amax: Some(&mut amax_h) })?;
/// ```
#[allow(clippy::too_many_arguments)]
pub fn gemm_fp8_cast<TA: Elem, TB: Elem, C: Elem>(
    gpu: &Gpu, a: &Tensor<TA>, b: &Tensor<TB>, c: &mut Tensor<C>, sa: Scale, sb: Scale, epi: &Epilogue<bf16>, cast: Cast,
) -> Result<()> {
    let (m, n, _) = fp8_shape(a, b, c)?;
    let cfg = crate::tune::config(gpu.compute_capability(), "gemm_fp8", gemm_fp8_kernel::CONFIGS, &[m, n, a.shape()[1]], || default_config(m, n));
    fp8_launch(gpu, cfg, a, b, c, [sa, sb], epi, cast)
}

/// `(m, n, k)` of `c = a·bᵀ` ([`gemm_shape`]) for FP8 operands whose rows
/// the copy engine can read, or an error naming what does not fit.
fn fp8_shape<TA: Elem, TB: Elem, C: Elem>(a: &Tensor<TA>, b: &Tensor<TB>, c: &Tensor<C>) -> Result<(usize, usize, usize)> {
    check_fp8::<TA, TB, C>()?;
    let (m, n, k) = gemm_shape(a, b, c)?;
    if k % 16 != 0 {
        return Err(Error::Shape(format!("gemm_fp8: k = {k} is not a multiple of 16 (the copy engine reads rows of 16-byte multiples; pad k with zeros)")));
    }
    Ok((m, n, k))
}

/// The kernel's `scales` argument: A's kind in bits 0-1, B's in 2-3 (what
/// `ScaleKind::of` reads back).
fn scale_bits(a: ScaleKind, b: ScaleKind) -> u32 {
    a as u32 | (b as u32) << 2
}

/// `gemm_fp8` with config `cfg` of `gemm_fp8_kernel::CONFIGS` (for tests,
/// sweeps and the tuner).
#[allow(clippy::too_many_arguments)]
pub fn gemm_fp8_with_config<TA: Elem, TB: Elem>(
    gpu: &Gpu, cfg: usize, a: &Tensor<TA>, b: &Tensor<TB>, c: &mut Tensor<bf16>, sa: Scale, sb: Scale, epi: &Epilogue<bf16>,
) -> Result<()> {
    fp8_launch(gpu, cfg, a, b, c, [sa, sb], epi, Cast::default())
}

#[allow(clippy::too_many_arguments)]
fn fp8_launch<TA: Elem, TB: Elem, C: Elem>(
    gpu: &Gpu, cfg: usize, a: &Tensor<TA>, b: &Tensor<TB>, c: &mut Tensor<C>, [sa, sb]: [Scale; 2], epi: &Epilogue<bf16>, cast: Cast,
) -> Result<()> {
    let (m, n, k) = fp8_shape(a, b, c)?;
    cast.check()?;
    sa.check("a's scale", m)?;
    sb.check("b's scale", n)?;
    let e = epi.epi();
    match e.bias {
        crate::gemm::Bias::PerColumn => expect_shape("bias", epi.bias().unwrap(), &[n])?,
        crate::gemm::Bias::PerRow => expect_shape("bias", epi.bias().unwrap(), &[m])?,
        crate::gemm::Bias::None => {}
    }
    if let Some(r) = epi.residual_tensor() {
        expect_shape("residual", r, &[m, n])?;
    }
    let [bm, bn] = block_shape("gemm_fp8_kernel", gemm_fp8_kernel::CONFIGS, cfg)?;
    let (map_a, map_b) = (tma_map(gpu, a, [k, m, 1], [k, k * m], bm)?, tma_map(gpu, b, [k, n, 1], [k, k * n], bn)?);
    // Unused operands are empty placeholders (no allocation) the kernel never reads.
    let (none16, none32, mut none_mut) = (gpu.alloc::<bf16>(&[0])?, gpu.alloc::<f32>(&[0])?, gpu.alloc::<f32>(&[0])?);
    let (bias, residual) = (epi.bias().unwrap_or(&none16), epi.residual_tensor().unwrap_or(&none16));
    let (ta, tb) = (sa.tensor().unwrap_or(&none32), sb.tensor().unwrap_or(&none32));
    let scales = scale_bits(sa.kind(), sb.kind());
    let flags = e.flags() | cast.flags();
    let (tc, amax) = (cast.scale.unwrap_or(&none32), cast.amax.unwrap_or(&mut none_mut));
    gemm_fp8_kernel::launch(gpu, cfg, a, b, c, bias, residual, ta, tb, tc, amax, m, n, k, n, e.alpha, e.beta, flags, scales, map_a, map_b)
}

/// `gemm_fp8` in the CPU interpreter, on slices: `scale_a` and `scale_b`
/// hold nothing (no scale), one value (per tensor) or one a row; `bias`
/// and `residual` may be empty where `epi` does not use them.
#[allow(clippy::too_many_arguments)]
pub fn gemm_fp8_cpu<TA: Elem, TB: Elem>(
    cfg: usize, a: &[TA], b: &[TB], mnk: [usize; 3], scale_a: &[f32], scale_b: &[f32], bias: &[bf16], residual: &[bf16], epi: crate::gemm::Epi,
) -> Vec<bf16> {
    gemm_fp8_cast_cpu(cfg, a, b, mnk, [scale_a, scale_b, &[]], bias, residual, epi, &mut [])
}

/// [`gemm_fp8_cast`] in the CPU interpreter: [`gemm_fp8_cpu`] with C's
/// scale in `scales[2]` (empty or one value) and its amax in `amax` (empty
/// or one value).
#[allow(clippy::too_many_arguments)]
pub fn gemm_fp8_cast_cpu<TA: Elem, TB: Elem, C: Elem>(
    cfg: usize, a: &[TA], b: &[TB], [m, n, k]: [usize; 3], [scale_a, scale_b, scale_c]: [&[f32]; 3], bias: &[bf16], residual: &[bf16],
    epi: crate::gemm::Epi, amax: &mut [f32],
) -> Vec<C> {
    check_fp8::<TA, TB, C>().unwrap_or_else(|e| panic!("{e}"));
    assert!(a.len() == m * k && b.len() == n * k, "gemm_fp8_cpu: a holds {}, b {} elements; expected {m}×{k} and {n}×{k}", a.len(), b.len());
    let kind = |s: &[f32], rows: usize| match s.len() {
        0 => ScaleKind::None,
        1 if rows != 1 => ScaleKind::Tensor,
        l if l == rows => ScaleKind::Row,
        l => panic!("gemm_fp8_cpu: a scale holds {l} values; expected 0, 1 or {rows}"),
    };
    let scales = scale_bits(kind(scale_a, m), kind(scale_b, n));
    let flags = epi.flags() | Out::flags(!scale_c.is_empty(), !amax.is_empty());
    let mut c = vec![C::default(); m * n];
    gemm_fp8_kernel::cpu(cfg, a, b, &mut c, bias, residual, scale_a, scale_b, scale_c, amax, m, n, k, n, epi.alpha, epi.beta, flags, scales, 0, 0);
    c
}
