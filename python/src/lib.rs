//! `rustile._rustile`, the extension module under the `rustile` Python
//! package: Rustile's ops on memory that Python owns (PyTorch tensors,
//! NumPy arrays), on the caller's stream.
//!
//! Principles:
//! * **Python allocates, Rust runs.** Every op takes its outputs (and any
//!   saved statistics) as arguments, allocated by the caller, so PyTorch's
//!   caching allocator and graph capture see every byte. The package's
//!   Python layer (`rustile/__init__.py`) allocates them.
//! * **An array is a tuple** `(address, shape, strides, dtype, device)`:
//!   strides in elements, dtype `"bf16"`, `"f16"` or `"f32"`, device the CUDA
//!   ordinal or -1 for host memory. Host arrays run in the CPU interpreter,
//!   so the package works, slowly, without a GPU.
//! * **The same checks and messages as Rust.** Arrays become borrowed
//!   [`Tensor`]s ([`Tensor::borrowed`]): shapes, dtypes, strides and
//!   alignment are checked by the ops themselves. A Rust error becomes a
//!   Python `ValueError` (shapes, arguments) or `RuntimeError` (CUDA, a
//!   launch), with the same text; a panic is caught and raised as a
//!   `RuntimeError`, never unwound into Python.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rustile::{bf16, f16, F8E4M3, F8E5M2};
use rustile_host::{Elem, Error, Gpu, Tensor};
use rustile_ops::attention::{attention as attention_fwd, attention_backward as attention_bwd, attention_varlen, attention_varlen_backward, Attention, SeqLens};
use rustile_ops::dual_gemm::dual_gemm as dual_gemm_op;
use rustile_ops::delta_rule::{delta_rule as delta_rule_op, delta_rule_backward as delta_rule_backward_op, DeltaRule, DeltaRuleGrads, VarLens};
use rustile_ops::gemm::{gemm_cast, Act, Cast, Epilogue, Mat, Transpose};
use rustile_ops::gemm_fp8::{gemm_fp8 as gemm_fp8_op, Scale};
use rustile_ops::grouped_gemm::{gemm_groups, Groups};
use rustile_ops::quasar::{
    conv_silu as conv_silu_op, conv_silu_backward as conv_silu_backward_op, gated_out_proj as gated_out_proj_op, gated_rms_norm as gated_rms_norm_op,
    gated_rms_norm_backward as gated_rms_norm_backward_op, proj_conv_silu as proj_conv_silu_op, ConvScratch, NormScratch,
};
use rustile_ops::norm::{layer_norm as layer_norm_op, norm_backward as norm_backward_op, norm_backward_scratch, rms_norm as rms_norm_op, NormGrads, Saved};
use rustile_ops::softmax::softmax as softmax_op;
use rustile_ops::trimul::{Params as TriMulParams, TriMul as TriMulOp, Workspace as TriMulWorkspace};

// ---- arrays and devices -------------------------------------------------------------------

/// An array as the Python layer describes it.
#[derive(FromPyObject)]
struct Arr(u64, Vec<usize>, Vec<i64>, String, i64);

impl Arr {
    fn dtype(&self) -> &str {
        &self.3
    }

    fn device(&self) -> i64 {
        self.4
    }

    /// The borrowed tensor over this array's memory, as `T`.
    fn tensor<T: Elem>(&self, gpu: &Gpu) -> rustile_host::Result<Tensor<T>> {
        if self.3 != T::NAME {
            return Err(Error::DType(format!("an array of {} where {} is expected (all of an op's arrays share its dtype, statistics are f32)", self.3, T::NAME)));
        }
        self.borrow(gpu)
    }

    /// Sequence offsets (`cu_seqlens`), int32 as torch and FlashAttention
    /// keep them, read as u32: a negative one reads as past every token,
    /// which the kernels cut to the tokens there are.
    fn offsets(&self, gpu: &Gpu) -> rustile_host::Result<Tensor<u32>> {
        match self.dtype() {
            "i32" | "u32" => self.borrow(gpu),
            other => Err(Error::DType(format!("cu_seqlens must be int32, not {other}"))),
        }
    }

    fn borrow<T: Elem>(&self, gpu: &Gpu) -> rustile_host::Result<Tensor<T>> {
        let strides = self
            .2
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| Error::Shape(format!("negative strides {:?} (make the array contiguous)", self.2))))
            .collect::<rustile_host::Result<Vec<usize>>>()?;
        // SAFETY: the Python layer passes live arrays and keeps them alive
        // across the call; on a GPU it waits on nothing, and PyTorch's
        // allocator keeps memory alive for work queued on its stream.
        unsafe { Tensor::borrowed(gpu, self.0, &self.1, &strides) }
    }
}

/// The borrowed tensor of an optional array.
fn optional<T: Elem>(a: &Option<Arr>, gpu: &Gpu) -> rustile_host::Result<Option<Tensor<T>>> {
    a.as_ref().map(|a| a.tensor::<T>(gpu)).transpose()
}

/// Device 0 of this process (opened on first use) or the interpreter.
fn device(ordinal: i64) -> rustile_host::Result<&'static Gpu> {
    static INTERPRETER: OnceLock<Gpu> = OnceLock::new();
    static CUDA: OnceLock<Result<Gpu, String>> = OnceLock::new();
    match ordinal {
        -1 => Ok(INTERPRETER.get_or_init(Gpu::interpreter)),
        // Opened once; without a GPU every call says why, in the driver's words.
        0 => CUDA.get_or_init(|| Gpu::new().map_err(|e| e.to_string())).as_ref().map_err(|e| Error::NoDriver(e.clone())),
        n => Err(Error::Invalid(format!("rustile runs on CUDA device 0 (or host memory); this array is on cuda:{n}"))),
    }
}

fn to_py(e: Error) -> PyErr {
    match e {
        Error::Shape(_) | Error::DType(_) | Error::Misaligned(_) | Error::Invalid(_) => PyValueError::new_err(e.to_string()),
        // Opening the GPU failed: its message, as it was.
        Error::NoDriver(why) => PyRuntimeError::new_err(why),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// Runs `f` on the device all of `arrays` live on, with the GIL released,
/// its work on `stream` (a CUDA stream handle; ignored for host arrays);
/// errors and panics become Python exceptions.
fn run(py: Python<'_>, arrays: &[&Arr], stream: u64, f: impl FnOnce(&Gpu) -> rustile_host::Result<()> + Send) -> PyResult<()> {
    let ordinal = arrays.first().map_or(-1, |a| a.device());
    if let Some(other) = arrays.iter().find(|a| a.device() != ordinal) {
        return Err(PyValueError::new_err(format!(
            "arrays on different devices ({} and {}): all of an op's arrays must be on one",
            where_(ordinal),
            where_(other.device())
        )));
    }
    let outcome = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let gpu = device(ordinal)?;
            // SAFETY: the handle is the caller's current stream on device 0.
            unsafe { gpu.on_stream(stream, || f(gpu)) }
        }))
    });
    match outcome {
        Ok(done) => done.map_err(to_py),
        Err(p) => {
            let text = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(PyRuntimeError::new_err(format!("rustile panicked (a bug; please report it): {}", text.unwrap_or_default())))
        }
    }
}

fn where_(ordinal: i64) -> String {
    if ordinal < 0 { "host memory".into() } else { format!("cuda:{ordinal}") }
}

/// Runs `$body` with `$t` the element type named by `$dtype`, one of the
/// listed names (`"bf16" => bf16, ...`); any other is a dtype error.
macro_rules! with_type {
    ($dtype:expr, $t:ident => $body:expr, $($name:literal => $ty:ty),+) => {
        match $dtype {
            $($name => {
                type $t = $ty;
                $body
            })+
            other => Err(Error::DType(format!("dtype {other} is not supported here ({})", [$($name),+].join(", ")))),
        }
    };
}

/// [`with_type!`] over the 16- and 32-bit floats.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        with_type!($dtype, $t => $body, "bf16" => bf16, "f16" => f16, "f32" => f32)
    };
}

// ---- ops ------------------------------------------------------------------------------------

/// `y = softmax(x)` over the last dim of the 2-D `x`.
#[pyfunction]
fn softmax(py: Python<'_>, x: Arr, y: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&x, &y], stream, |gpu| with_dtype!(x.dtype(), T => softmax_op(gpu, &x.tensor::<T>(gpu)?, &mut y.tensor::<T>(gpu)?)))
}

/// RMSNorm of the 2-D `x` over its last dim: `y`, and `rstd` (f32, a row each).
#[pyfunction]
fn rms_norm(py: Python<'_>, x: Arr, w: Arr, eps: f32, y: Arr, rstd: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&x, &w, &y, &rstd], stream, |gpu| {
        with_dtype!(x.dtype(), T => rms_norm_op(gpu, &x.tensor::<T>(gpu)?, &w.tensor::<T>(gpu)?, eps, &mut y.tensor::<T>(gpu)?, &mut rstd.tensor(gpu)?))
    })
}

/// LayerNorm of the 2-D `x` over its last dim (bias `b` optional): `y`, `mean` and `rstd` (f32).
#[pyfunction]
#[pyo3(signature = (x, w, b, eps, y, mean, rstd, stream))]
#[allow(clippy::too_many_arguments)]
fn layer_norm(py: Python<'_>, x: Arr, w: Arr, b: Option<Arr>, eps: f32, y: Arr, mean: Arr, rstd: Arr, stream: u64) -> PyResult<()> {
    let mut all = vec![&x, &w, &y, &mean, &rstd];
    all.extend(b.as_ref());
    run(py, &all, stream, |gpu| {
        with_dtype!(x.dtype(), T => {
            let b = optional::<T>(&b, gpu)?;
            layer_norm_op(gpu, &x.tensor::<T>(gpu)?, &w.tensor::<T>(gpu)?, b.as_ref(), eps, &mut y.tensor::<T>(gpu)?, &mut mean.tensor(gpu)?, &mut rstd.tensor(gpu)?)
        })
    })
}

/// The backward of [`rms_norm`] (no `mean`) or [`layer_norm`] (its `mean`;
/// `db` when it had a bias): `dx` like `x`, `dw` and `db` `[cols]` f32, from
/// `dy` and the forward's statistics. Its scratch is allocated here, on the stream.
#[pyfunction]
#[pyo3(signature = (dy, x, w, mean, rstd, dx, dw, db, stream))]
#[allow(clippy::too_many_arguments)]
fn norm_backward(py: Python<'_>, dy: Arr, x: Arr, w: Arr, mean: Option<Arr>, rstd: Arr, dx: Arr, dw: Arr, db: Option<Arr>, stream: u64) -> PyResult<()> {
    let mut all = vec![&dy, &x, &w, &rstd, &dx, &dw];
    all.extend(mean.as_ref());
    all.extend(db.as_ref());
    run(py, &all, stream, |gpu| {
        with_dtype!(x.dtype(), T => {
            let (xt, rstd) = (x.tensor::<T>(gpu)?, rstd.tensor::<f32>(gpu)?);
            let mean = optional::<f32>(&mean, gpu)?;
            let saved = match &mean {
                Some(mean) => Saved::LayerNorm { mean, rstd: &rstd },
                None => Saved::RmsNorm { rstd: &rstd },
            };
            let (mut gx, mut gw) = (dx.tensor::<T>(gpu)?, dw.tensor::<f32>(gpu)?);
            let mut gb = optional::<f32>(&db, gpu)?;
            let &[rows, cols] = xt.shape() else {
                return Err(Error::Shape(format!("norm_backward: x must be [rows, cols]; it has shape {:?}", xt.shape())));
            };
            let mut scratch = norm_backward_scratch(gpu, rows, cols)?;
            let grads = NormGrads { dx: &mut gx, dw: &mut gw, db: gb.as_mut() };
            norm_backward_op(gpu, &dy.tensor::<T>(gpu)?, &xt, &w.tensor::<T>(gpu)?, saved, None, grads, &mut scratch)
        })
    })
}

fn activation(name: &str) -> rustile_host::Result<Act> {
    Ok(match name {
        "none" => Act::None,
        "relu" => Act::Relu,
        "relu2" => Act::Relu2,
        "silu" => Act::Silu,
        "gelu_tanh" => Act::GeluTanh,
        other => return Err(Error::Invalid(format!("activation {other:?} is not one of none, relu, relu2, silu, gelu_tanh"))),
    })
}

/// The GEMMs' fused epilogue: `act(alpha·product + bias) + residual`.
fn epilogue<'a, T: Elem>(act: &str, alpha: f32, bias: Option<&'a Tensor<T>>, residual: Option<&'a Tensor<T>>) -> rustile_host::Result<Epilogue<'a, T>> {
    let mut epi = Epilogue::new().act(activation(act)?).scale(alpha);
    if let Some(bias) = bias {
        epi = epi.bias_per_column(bias);
    }
    if let Some(residual) = residual {
        epi = epi.residual(residual);
    }
    Ok(epi)
}

/// `c = act(alpha·a·bᵀ + bias) + residual` (`b` as `[n, k]`, or `[k, n]`
/// with `b_kn`), in the GEMM's fused epilogue. `a` `[m, k]` (a batch `[z,
/// m, k]`), or `[k, m]` with `a_km` (a weight gradient's `dyᵀ·x`). `c` is of
/// `a`'s dtype, or f32, or e4m3 (from bf16; saturating), times `out_scale`
/// (one f32) if given, with the largest |value| before that raised into
/// `amax` (one f32) if given.
#[pyfunction]
#[pyo3(signature = (a, b, c, a_km, b_kn, bias, act, residual, alpha, out_scale, amax, stream))]
#[allow(clippy::too_many_arguments)]
fn gemm(
    py: Python<'_>, a: Arr, b: Arr, c: Arr, a_km: bool, b_kn: bool, bias: Option<Arr>, act: &str, residual: Option<Arr>, alpha: f32, out_scale: Option<Arr>,
    amax: Option<Arr>, stream: u64,
) -> PyResult<()> {
    let mut all = vec![&a, &b, &c];
    all.extend([&bias, &residual, &out_scale, &amax].into_iter().flatten());
    run(py, &all, stream, |gpu| {
        with_dtype!(a.dtype(), T => {
            let (at, bt) = (a.tensor::<T>(gpu)?, b.tensor::<T>(gpu)?);
            let (bias, residual) = (optional::<T>(&bias, gpu)?, optional::<T>(&residual, gpu)?);
            let epi = epilogue(act, alpha, bias.as_ref(), residual.as_ref())?;
            let (scale, mut amax) = (optional::<f32>(&out_scale, gpu)?, optional::<f32>(&amax, gpu)?);
            let cast = Cast { scale: scale.as_ref(), amax: amax.as_mut() };
            // Each operand as stored, or read transposed.
            let am: Mat<T> = if a_km { at.t() } else { (&at).into() };
            let bm: Mat<T> = if b_kn { (&bt).into() } else { bt.t() };
            match c.dtype() {
                same if same == T::NAME => gemm_cast(gpu, am, bm, &mut c.tensor::<T>(gpu)?, &epi, cast),
                "f32" => gemm_cast(gpu, am, bm, &mut c.tensor::<f32>(gpu)?, &epi, cast),
                "e4m3" => gemm_cast(gpu, am, bm, &mut c.tensor::<F8E4M3>(gpu)?, &epi, cast),
                other => Err(Error::DType(format!("gemm: the output is {other}; it can be {}, f32 or e4m3", T::NAME))),
            }
        })
    })
}

/// How an FP8 operand was scaled: no array, one value, or one a row.
fn fp8_scale<'a>(t: &'a Option<Tensor<f32>>, rows: usize) -> Scale<'a> {
    match t {
        None => Scale::None,
        Some(t) if t.numel() == 1 && rows != 1 => Scale::Tensor(t),
        Some(t) => Scale::Rows(t),
    }
}

/// `c = act(alpha·sa·sb·(a·bᵀ) + bias) + residual` from FP8 `a` `[m, k]`
/// and `b` `[n, k]` (e4m3 or e5m2 each) into bf16 `c`; `sa`, `sb` (f32)
/// hold one value or one a row, or are absent; bias and residual bf16.
#[pyfunction]
#[pyo3(signature = (a, b, c, sa, sb, bias, act, residual, alpha, stream))]
#[allow(clippy::too_many_arguments)]
fn gemm_fp8(
    py: Python<'_>, a: Arr, b: Arr, c: Arr, sa: Option<Arr>, sb: Option<Arr>, bias: Option<Arr>, act: &str, residual: Option<Arr>, alpha: f32, stream: u64,
) -> PyResult<()> {
    let mut all = vec![&a, &b, &c];
    all.extend([&sa, &sb, &bias, &residual].into_iter().flatten());
    run(py, &all, stream, |gpu| {
        let (bias, residual) = (optional::<bf16>(&bias, gpu)?, optional::<bf16>(&residual, gpu)?);
        let epi = epilogue(act, alpha, bias.as_ref(), residual.as_ref())?;
        let (ta, tb) = (optional::<f32>(&sa, gpu)?, optional::<f32>(&sb, gpu)?);
        let mut ct = c.tensor::<bf16>(gpu)?;
        let &[m, n] = ct.shape() else {
            return Err(Error::Shape(format!("gemm_fp8: c must be [m, n]; it has shape {:?}", ct.shape())));
        };
        with_type!(a.dtype(), TA => with_type!(b.dtype(), TB => {
            gemm_fp8_op(gpu, &a.tensor::<TA>(gpu)?, &b.tensor::<TB>(gpu)?, &mut ct, fp8_scale(&ta, m), fp8_scale(&tb, n), &epi)
        }, "e4m3" => F8E4M3, "e5m2" => F8E5M2), "e4m3" => F8E4M3, "e5m2" => F8E5M2)
    })
}

/// `c_g = a_g·b_gᵀ` for groups of sizes `[m, n, k]` packed back to back in
/// `a`, `b` and `c` (a mixture of experts' tokens sorted by expert), in one
/// launch. The group table is built and uploaded on a size list's first
/// call and kept, so a CUDA graph can capture later calls with those sizes.
#[pyfunction]
fn grouped_gemm(py: Python<'_>, a: Arr, b: Arr, c: Arr, sizes: Vec<[usize; 3]>, stream: u64) -> PyResult<()> {
    run(py, &[&a, &b, &c], stream, |gpu| {
        let mut kept = GROUP_TABLES.lock().unwrap_or_else(|p| p.into_inner());
        let tables = kept.get_or_insert_with(HashMap::new);
        let key = (gpu.is_interpreter(), sizes.clone());
        let made;
        let groups = match tables.get(&key) {
            Some(g) => g,
            None if gpu.capturing() => {
                return Err(Error::Invalid(format!(
                    "grouped_gemm: the sizes {sizes:?} were not seen before this CUDA graph capture, and their table is uploaded on first use: run the step once outside the capture"
                )))
            }
            None if tables.len() < GROUP_TABLES_KEPT => tables.entry(key).or_insert(Groups::new(gpu, &sizes)?),
            None => {
                made = Groups::new(gpu, &sizes)?;
                &made
            }
        };
        with_dtype!(a.dtype(), T => gemm_groups(gpu, groups, &a.tensor::<T>(gpu)?, &b.tensor::<T>(gpu)?, &mut c.tensor::<T>(gpu)?))
    })
}

/// The grouped GEMM's tables by device (the interpreter or the GPU) and
/// sizes, never dropped (a captured graph may read them): a few KB each, at
/// most [`GROUP_TABLES_KEPT`]; past that a call builds its own.
static GROUP_TABLES: Mutex<Option<HashMap<(bool, Vec<[usize; 3]>), Groups>>> = Mutex::new(None);
const GROUP_TABLES_KEPT: usize = 4096;

fn attention_options(causal: bool, scale: Option<f32>, keys: Option<usize>) -> Attention {
    Attention { causal, scale, keys, config: None }
}

/// Attention of `q` `[batch, sq, heads, d]` over `k`, `v` `[batch, sk,
/// kv_heads, d]`: `o` like `q`, and `lse` `[batch, heads, sq]` (f32, for the backward).
#[pyfunction]
#[pyo3(signature = (q, k, v, o, lse, causal, scale, keys, stream))]
#[allow(clippy::too_many_arguments)]
fn attention(py: Python<'_>, q: Arr, k: Arr, v: Arr, o: Arr, lse: Arr, causal: bool, scale: Option<f32>, keys: Option<usize>, stream: u64) -> PyResult<()> {
    run(py, &[&q, &k, &v, &o, &lse], stream, |gpu| {
        with_dtype!(q.dtype(), T => attention_fwd(
            gpu, &q.tensor::<T>(gpu)?, &k.tensor::<T>(gpu)?, &v.tensor::<T>(gpu)?, &mut o.tensor::<T>(gpu)?, &mut lse.tensor(gpu)?,
            attention_options(causal, scale, keys),
        ))
    })
}

/// [`attention`]'s backward: `dq`, `dk`, `dv` from `do` and the forward's `o` and `lse`.
#[pyfunction]
#[pyo3(signature = (q, k, v, o, d_o, lse, dq, dk, dv, causal, scale, keys, stream))]
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    py: Python<'_>, q: Arr, k: Arr, v: Arr, o: Arr, d_o: Arr, lse: Arr, dq: Arr, dk: Arr, dv: Arr, causal: bool, scale: Option<f32>, keys: Option<usize>,
    stream: u64,
) -> PyResult<()> {
    run(py, &[&q, &k, &v, &o, &d_o, &lse, &dq, &dk, &dv], stream, |gpu| {
        with_dtype!(q.dtype(), T => {
            let ins = [q.tensor::<T>(gpu)?, k.tensor::<T>(gpu)?, v.tensor::<T>(gpu)?, o.tensor::<T>(gpu)?, d_o.tensor::<T>(gpu)?];
            let [ins_q, ins_k, ins_v, ins_o, ins_do] = &ins;
            let (mut gq, mut gk, mut gv) = (dq.tensor::<T>(gpu)?, dk.tensor::<T>(gpu)?, dv.tensor::<T>(gpu)?);
            attention_bwd(gpu, [ins_q, ins_k, ins_v, ins_o, ins_do], &lse.tensor(gpu)?, [&mut gq, &mut gk, &mut gv], attention_options(causal, scale, keys))
        })
    })
}

/// [`attention`] over sequences of different lengths packed back to back:
/// `q`, `o` `[Σ q_lens, heads, d]`, `k`, `v` `[Σ k_lens, kv_heads, d]`,
/// `lse` `[heads, Σ q_lens]`; sequence `i`'s queries are tokens `cu_q[i] ..
/// cu_q[i+1]` (int32 offsets on the arrays' device, never read here, so a
/// CUDA graph can capture the call), at most `max_q` of them, its keys
/// likewise.
#[pyfunction]
#[pyo3(signature = (q, k, v, cu_q, cu_k, max_q, max_k, o, lse, causal, scale, stream))]
#[allow(clippy::too_many_arguments)]
fn attention_packed(
    py: Python<'_>, q: Arr, k: Arr, v: Arr, cu_q: Arr, cu_k: Arr, max_q: usize, max_k: usize, o: Arr, lse: Arr, causal: bool, scale: Option<f32>,
    stream: u64,
) -> PyResult<()> {
    run(py, &[&q, &k, &v, &cu_q, &cu_k, &o, &lse], stream, |gpu| {
        let seqs = seq_lens(gpu, [&cu_q, &cu_k], [max_q, max_k], [&q, &k])?;
        with_dtype!(q.dtype(), T => attention_varlen(
            gpu, &q.tensor::<T>(gpu)?, &k.tensor::<T>(gpu)?, &v.tensor::<T>(gpu)?, &seqs, &mut o.tensor::<T>(gpu)?, &mut lse.tensor(gpu)?,
            attention_options(causal, scale, None),
        ))
    })
}

/// The packed sequences of `q` and `k` (their rows the totals) from their offsets.
fn seq_lens(gpu: &Gpu, [cu_q, cu_k]: [&Arr; 2], maxes: [usize; 2], [q, k]: [&Arr; 2]) -> rustile_host::Result<SeqLens> {
    let rows = |a: &Arr| a.1.first().copied().unwrap_or(0);
    SeqLens::from_offsets(cu_q.offsets(gpu)?, cu_k.offsets(gpu)?, maxes, [rows(q), rows(k)])
}

/// [`attention_packed`]'s backward.
#[pyfunction]
#[pyo3(signature = (q, k, v, o, d_o, lse, cu_q, cu_k, max_q, max_k, dq, dk, dv, causal, scale, stream))]
#[allow(clippy::too_many_arguments)]
fn attention_packed_backward(
    py: Python<'_>, q: Arr, k: Arr, v: Arr, o: Arr, d_o: Arr, lse: Arr, cu_q: Arr, cu_k: Arr, max_q: usize, max_k: usize, dq: Arr, dk: Arr, dv: Arr,
    causal: bool, scale: Option<f32>, stream: u64,
) -> PyResult<()> {
    run(py, &[&q, &k, &v, &o, &d_o, &lse, &cu_q, &cu_k, &dq, &dk, &dv], stream, |gpu| {
        let seqs = seq_lens(gpu, [&cu_q, &cu_k], [max_q, max_k], [&q, &k])?;
        with_dtype!(q.dtype(), T => {
            let ins = [q.tensor::<T>(gpu)?, k.tensor::<T>(gpu)?, v.tensor::<T>(gpu)?, o.tensor::<T>(gpu)?, d_o.tensor::<T>(gpu)?];
            let [iq, ik, iv, io, ido] = &ins;
            let (mut gq, mut gk, mut gv) = (dq.tensor::<T>(gpu)?, dk.tensor::<T>(gpu)?, dv.tensor::<T>(gpu)?);
            attention_varlen_backward(gpu, [iq, ik, iv, io, ido], &lse.tensor(gpu)?, &seqs, [&mut gq, &mut gk, &mut gv], attention_options(causal, scale, None))
        })
    })
}

/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` (a SwiGLU's gate and up projections in one
/// kernel): `a` `[m, k]`, `b1`, `b2` `[n, k]`, `c` `[m, n]`.
#[pyfunction]
fn dual_gemm(py: Python<'_>, a: Arr, b1: Arr, b2: Arr, c: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&a, &b1, &b2, &c], stream, |gpu| {
        with_dtype!(a.dtype(), T => dual_gemm_op(gpu, &a.tensor::<T>(gpu)?, &b1.tensor::<T>(gpu)?, &b2.tensor::<T>(gpu)?, &mut c.tensor::<T>(gpu)?))
    })
}

/// Packed sequences of the delta rule from their int32 offsets
/// (`cu_seqlens`, on the arrays' device; never read here), the longest
/// `longest` tokens, packed into `q`'s second dim.
fn var_lens(gpu: &Gpu, cu: &Option<Arr>, longest: usize, q: &Arr) -> rustile_host::Result<Option<VarLens>> {
    let total = q.1.get(1).copied().unwrap_or(0);
    cu.as_ref().map(|cu| VarLens::from_offsets(cu.offsets(gpu)?, longest, total)).transpose()
}

/// The delta rule (QuasarAttention's op): `o` from `q`, `k`, `v` `[batch,
/// tokens, heads, 64]` and each head's `beta` (f32), from `initial`
/// (`[seqs, heads, 64, 64]` f32) or zeros, the final state into
/// `final_state`. With `cu_seqlens` (int32 `[seqs + 1]`), `batch` is 1 and
/// its tokens are sequences packed back to back, the longest `max_seqlen`.
#[pyfunction]
#[pyo3(signature = (q, k, v, beta, o, initial, final_state, cu_seqlens, max_seqlen, stream))]
#[allow(clippy::too_many_arguments)]
fn delta_rule(
    py: Python<'_>, q: Arr, k: Arr, v: Arr, beta: Arr, o: Arr, initial: Option<Arr>, final_state: Option<Arr>, cu_seqlens: Option<Arr>, max_seqlen: usize,
    stream: u64,
) -> PyResult<()> {
    let mut all = vec![&q, &k, &v, &beta, &o];
    all.extend([&initial, &final_state, &cu_seqlens].into_iter().flatten());
    run(py, &all, stream, |gpu| {
        let varlen = var_lens(gpu, &cu_seqlens, max_seqlen, &q)?;
        with_dtype!(q.dtype(), T => {
            let s0 = optional::<f32>(&initial, gpu)?;
            let mut s1 = optional::<f32>(&final_state, gpu)?;
            let opt = DeltaRule { initial: s0.as_ref(), varlen: varlen.as_ref(), ..DeltaRule::default() };
            delta_rule_op(gpu, &q.tensor::<T>(gpu)?, &k.tensor::<T>(gpu)?, &v.tensor::<T>(gpu)?, &beta.tensor(gpu)?, &mut o.tensor::<T>(gpu)?, s1.as_mut(), opt)
        })
    })
}

/// [`delta_rule`]'s backward: `dq`, `dk`, `dv` (like `q`), `dbeta`
/// (`[heads]` f32) and, with `d_initial`, the initial state's gradient, from
/// `do` and, optionally, the final state's gradient `d_final`; packed
/// sequences as in [`delta_rule`].
#[pyfunction]
#[pyo3(signature = (q, k, v, beta, d_o, initial, d_final, dq, dk, dv, dbeta, d_initial, cu_seqlens, max_seqlen, stream))]
#[allow(clippy::too_many_arguments)]
fn delta_rule_backward(
    py: Python<'_>, q: Arr, k: Arr, v: Arr, beta: Arr, d_o: Arr, initial: Option<Arr>, d_final: Option<Arr>, dq: Arr, dk: Arr, dv: Arr, dbeta: Arr,
    d_initial: Option<Arr>, cu_seqlens: Option<Arr>, max_seqlen: usize, stream: u64,
) -> PyResult<()> {
    let mut all = vec![&q, &k, &v, &beta, &d_o, &dq, &dk, &dv, &dbeta];
    all.extend([&initial, &d_final, &d_initial, &cu_seqlens].into_iter().flatten());
    run(py, &all, stream, |gpu| {
        let varlen = var_lens(gpu, &cu_seqlens, max_seqlen, &q)?;
        with_dtype!(q.dtype(), T => {
            let s0 = optional::<f32>(&initial, gpu)?;
            let ds1 = optional::<f32>(&d_final, gpu)?;
            let mut ds0 = optional::<f32>(&d_initial, gpu)?;
            let (mut gq, mut gk, mut gv, mut gb) = (dq.tensor::<T>(gpu)?, dk.tensor::<T>(gpu)?, dv.tensor::<T>(gpu)?, dbeta.tensor::<f32>(gpu)?);
            let grads = DeltaRuleGrads { dq: &mut gq, dk: &mut gk, dv: &mut gv, dbeta: &mut gb, d_initial: ds0.as_mut() };
            let opt = DeltaRule { initial: s0.as_ref(), varlen: varlen.as_ref(), ..DeltaRule::default() };
            delta_rule_backward_op(gpu, &q.tensor::<T>(gpu)?, &k.tensor::<T>(gpu)?, &v.tensor::<T>(gpu)?, &beta.tensor(gpu)?, &d_o.tensor::<T>(gpu)?, ds1.as_ref(), grads, opt)
        })
    })
}

/// QuasarAttention's short convolution: `y = silu(conv(x))`, causal, width
/// 4, per channel of `x` `[batch, tokens, channels]` (bf16), weights `w` `[4, channels]`.
#[pyfunction]
fn conv_silu(py: Python<'_>, x: Arr, w: Arr, y: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&x, &w, &y], stream, |gpu| conv_silu_op(gpu, &x.tensor::<bf16>(gpu)?, &w.tensor::<bf16>(gpu)?, &mut y.tensor::<bf16>(gpu)?))
}

/// [`conv_silu`]'s backward: `dx` (like `x`) and `dw` (`[4, channels]` f32)
/// from `dy`. Its scratch is allocated here, on the stream.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn conv_silu_backward(py: Python<'_>, x: Arr, w: Arr, dy: Arr, dx: Arr, dw: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&x, &w, &dy, &dx, &dw], stream, |gpu| {
        let xt = x.tensor::<bf16>(gpu)?;
        let mut scratch = ConvScratch::new(gpu, xt.shape())?;
        conv_silu_backward_op(gpu, &xt, &w.tensor(gpu)?, &dy.tensor(gpu)?, &mut dx.tensor(gpu)?, &mut dw.tensor(gpu)?, &mut scratch)
    })
}

/// QuasarAttention's projection and short convolution in one launch: `y =
/// silu(conv(x·wpᵀ))` with `x` `[batch, tokens, hidden]`, `wp` `[channels,
/// hidden]`, `w` `[4, channels]` (bf16); `pre` (optional, like `y`) gets
/// `x·wpᵀ`, what the backward needs.
#[pyfunction]
#[pyo3(signature = (x, wp, w, pre, y, stream))]
fn proj_conv_silu(py: Python<'_>, x: Arr, wp: Arr, w: Arr, pre: Option<Arr>, y: Arr, stream: u64) -> PyResult<()> {
    let mut all = vec![&x, &wp, &w, &y];
    all.extend(pre.as_ref());
    run(py, &all, stream, |gpu| {
        let mut kept = optional::<bf16>(&pre, gpu)?;
        proj_conv_silu_op(gpu, &x.tensor::<bf16>(gpu)?, &wp.tensor(gpu)?, &w.tensor(gpu)?, kept.as_mut(), &mut y.tensor(gpu)?)
    })
}

/// QuasarAttention's gate, output norm and output projection in one launch
/// on Hopper: `out = (RMSNorm(o)·w ⊙ sigmoid(g1·wg2ᵀ + bias))·woᵀ` per 64-wide
/// head of `o` `[.., heads·64]`, with `g1` `[.., rank]`, `wg2` `[heads·64,
/// rank]`, `bias` `[heads·64]`, `w` `[64]`, `wo` `[n_out, heads·64]` (bf16).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn gated_out_proj(py: Python<'_>, o: Arr, g1: Arr, wg2: Arr, bias: Arr, w: Arr, wo: Arr, eps: f32, out: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&o, &g1, &wg2, &bias, &w, &wo, &out], stream, |gpu| {
        let ot = o.tensor::<bf16>(gpu)?;
        gated_out_proj_op(gpu, &ot, &g1.tensor(gpu)?, &wg2.tensor(gpu)?, &bias.tensor(gpu)?, &w.tensor(gpu)?, &wo.tensor(gpu)?, eps, &mut out.tensor(gpu)?)
    })
}

/// QuasarAttention's output norm: `y = RMSNorm(o)·w ⊙ sigmoid(g)` over each
/// 64-wide head of `o`, `g` `[.., heads·64]` (bf16), `w` `[64]`; `rstd`
/// `[heads, tokens]` f32 for the backward.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn gated_rms_norm(py: Python<'_>, o: Arr, g: Arr, w: Arr, eps: f32, y: Arr, rstd: Arr, stream: u64) -> PyResult<()> {
    run(py, &[&o, &g, &w, &y, &rstd], stream, |gpu| {
        gated_rms_norm_op(gpu, &o.tensor::<bf16>(gpu)?, &g.tensor(gpu)?, &w.tensor(gpu)?, eps, &mut y.tensor(gpu)?, &mut rstd.tensor(gpu)?)
    })
}

/// [`gated_rms_norm`]'s backward: `d_o`, `dg` (like `o`), `dw` (`[64]` f32)
/// and, with `dg_sum` (`[heads·64]` f32), `Σ_t dg`, from `dy` and the forward's `rstd`.
#[pyfunction]
#[pyo3(signature = (dy, o, g, w, rstd, d_o, dg, dw, dg_sum, stream))]
#[allow(clippy::too_many_arguments)]
fn gated_rms_norm_backward(py: Python<'_>, dy: Arr, o: Arr, g: Arr, w: Arr, rstd: Arr, d_o: Arr, dg: Arr, dw: Arr, dg_sum: Option<Arr>, stream: u64) -> PyResult<()> {
    let mut all = vec![&dy, &o, &g, &w, &rstd, &d_o, &dg, &dw];
    all.extend(dg_sum.as_ref());
    run(py, &all, stream, |gpu| {
        let ot = o.tensor::<bf16>(gpu)?;
        let rstd = rstd.tensor::<f32>(gpu)?;
        let &[heads, tokens] = rstd.shape() else {
            return Err(Error::Shape(format!("gated_rms_norm_backward: rstd must be [heads, tokens]; it has shape {:?}", rstd.shape())));
        };
        let mut scratch = NormScratch::new(gpu, tokens, heads)?;
        let mut sum = optional::<f32>(&dg_sum, gpu)?;
        let (mut gd, mut gg, mut gw) = (d_o.tensor(gpu)?, dg.tensor(gpu)?, dw.tensor(gpu)?);
        gated_rms_norm_backward_op(gpu, &dy.tensor(gpu)?, &ot, &g.tensor(gpu)?, &w.tensor(gpu)?, &rstd, &mut gd, &mut gg, &mut gw, sum.as_mut(), &mut scratch)
    })
}

/// AlphaFold3's outgoing triangle multiplicative update with its weights
/// prepared once (`rustile_ops::trimul::TriMul`): made from the ten fp32
/// parameters in `rustile_ops::trimul::PARAM_NAMES` order, then run on
/// `x` `[batch, n, n, dim]` fp32 and a `mask` `[batch, n, n]` into `out`.
/// Its intermediates are kept for the last `[batch, n]` seen.
#[pyclass]
struct TriMul {
    op: TriMulOp,
    device: i64,
    /// The intermediates, for the `[batch, n]` they were made for.
    workspace: std::sync::Mutex<Option<([usize; 2], TriMulWorkspace)>>,
}

#[pymethods]
impl TriMul {
    #[new]
    fn new(py: Python<'_>, params: Vec<Arr>, dim: usize, hidden: usize) -> PyResult<TriMul> {
        let device = params.first().map_or(-1, |p| p.device());
        let mut made = None;
        run(py, &params.iter().collect::<Vec<_>>(), 0, |gpu| {
            let tensors = params.iter().map(|p| p.tensor::<f32>(gpu)).collect::<rustile_host::Result<Vec<_>>>()?;
            let fields: [&Tensor<f32>; 10] = tensors
                .iter()
                .collect::<Vec<_>>()
                .try_into()
                .map_err(|v: Vec<_>| Error::Invalid(format!("TriMul takes 10 parameters, not {}", v.len())))?;
            made = Some(TriMulOp::new(gpu, &TriMulParams::from_fields(fields), dim, hidden)?);
            Ok(())
        })?;
        Ok(TriMul { op: made.expect("made when run succeeds"), device, workspace: std::sync::Mutex::new(None) })
    }

    #[pyo3(signature = (x, mask, out, stream))]
    fn forward(&self, py: Python<'_>, x: Arr, mask: Option<Arr>, out: Arr, stream: u64) -> PyResult<()> {
        let mut all = vec![&x, &out];
        all.extend(mask.as_ref());
        if x.device() != self.device {
            return Err(PyValueError::new_err(format!("TriMul: its weights are on {}, x on {}", where_(self.device), where_(x.device()))));
        }
        run(py, &all, stream, |gpu| {
            let (xt, mut ot) = (x.tensor::<f32>(gpu)?, out.tensor::<f32>(gpu)?);
            let mt = optional::<f32>(&mask, gpu)?;
            let &[batch, n, ..] = xt.shape() else {
                return Err(Error::Shape(format!("trimul: x must be [batch, n, n, dim]; it has shape {:?}", xt.shape())));
            };
            let mut kept = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
            if kept.as_ref().is_none_or(|(made_for, _)| *made_for != [batch, n]) {
                *kept = Some(([batch, n], self.op.workspace(gpu, batch, n)?));
            }
            let (_, ws) = kept.as_mut().expect("made above");
            self.op.forward_into(gpu, &xt, mt.as_ref(), ws, &mut ot)
        })
    }
}

/// Host µs a launch of [`softmax`] takes from Rust (the best of five loops
/// of `n`, the GPU waited for between loops): the floor under the Python
/// call's overhead, for `bench/python_call.py`.
#[pyfunction]
fn softmax_launch_us(py: Python<'_>, x: Arr, y: Arr, stream: u64, n: usize) -> PyResult<f64> {
    let mut best = f64::INFINITY;
    run(py, &[&x, &y], stream, |gpu| {
        with_dtype!(x.dtype(), T => {
            let (xt, mut yt) = (x.tensor::<T>(gpu)?, y.tensor::<T>(gpu)?);
            for _ in 0..5 {
                let start = std::time::Instant::now();
                for _ in 0..n {
                    softmax_op(gpu, &xt, &mut yt)?;
                }
                best = best.min(start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64);
                gpu.sync()?;
            }
            Ok(())
        })
    })?;
    Ok(best)
}

/// What runs the ops on CUDA tensors: the GPU's name, or a `RuntimeError` saying why there is none.
#[pyfunction]
fn gpu_name() -> PyResult<String> {
    device(0).map(|g| g.name().to_string()).map_err(to_py)
}

#[pymodule]
fn _rustile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(softmax, m)?,
        wrap_pyfunction!(rms_norm, m)?,
        wrap_pyfunction!(layer_norm, m)?,
        wrap_pyfunction!(norm_backward, m)?,
        wrap_pyfunction!(gemm, m)?,
        wrap_pyfunction!(attention, m)?,
        wrap_pyfunction!(attention_backward, m)?,
        wrap_pyfunction!(attention_packed, m)?,
        wrap_pyfunction!(attention_packed_backward, m)?,
        wrap_pyfunction!(gemm_fp8, m)?,
        wrap_pyfunction!(grouped_gemm, m)?,
        wrap_pyfunction!(dual_gemm, m)?,
        wrap_pyfunction!(delta_rule, m)?,
        wrap_pyfunction!(delta_rule_backward, m)?,
        wrap_pyfunction!(conv_silu, m)?,
        wrap_pyfunction!(conv_silu_backward, m)?,
        wrap_pyfunction!(proj_conv_silu, m)?,
        wrap_pyfunction!(gated_out_proj, m)?,
        wrap_pyfunction!(gated_rms_norm, m)?,
        wrap_pyfunction!(gated_rms_norm_backward, m)?,
        wrap_pyfunction!(gpu_name, m)?,
        wrap_pyfunction!(softmax_launch_us, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_class::<TriMul>()
}
