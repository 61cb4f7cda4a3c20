//! MLP blocks on the GEMM family: `Y = act(X·W1ᵀ)·W2ᵀ` and the gated
//! (SwiGLU) form `Y = (silu(X·Wgᵀ) ⊙ X·Wuᵀ)·W2ᵀ`, with X `[rows, d_model]`,
//! W1, Wg, Wu `[d_ff, d_model]`, W2 `[d_model, d_ff]` (linear layers'
//! weights) and Y `[rows, d_model]`. Any sizes (d_ff = 1365 included).
//!
//! This is the two-kernel form: the first GEMM applies the activation (or
//! the SwiGLU gate, as one dual GEMM) in its epilogue and writes the hidden
//! activations once, `[rows, d_ff]` in `T`; the second GEMM reads them.
//! Where d_ff is not a multiple of 8 (1365), the hidden rows are padded to
//! one: the input weights gain zero rows and W2 zero columns (copies made
//! per call, a few µs; [`padded_weights`] makes them once ahead), so every
//! row is 16-byte aligned and both GEMMs take the aligned (TMA) copies. A
//! pad column of the hidden activations is `act(0) = 0` and meets zero
//! weights.
//!
//! A single kernel that streams d_ff through on-chip memory (the hidden
//! activations never written) was weighed and not built: both GEMMs here
//! are compute-bound at these widths, and at d_model 512 such a kernel
//! holds a `[rows, 512]` f32 accumulator per block beside the hidden chunk,
//! which is more registers than a warpgroup has unless the hidden chunk is
//! computed twice. RESULTS, "The MLP as one kernel, weighed" has the figures.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::check::matrix;
    use crate::dual_gemm::{dual_gemm, dual_gemm_cpu};
    use crate::gemm::{gemm_nt, gemm_nt_cpu, gemm_nt_fused, launch_plan_cpu, Act, Epi, Epilogue, Plan};
    use rustile::Elem;
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// `(rows, d_model, d_ff)`, or an error naming what does not fit.
    fn mlp_shape<T: Elem>(x: &Tensor<T>, w_in: &[&Tensor<T>], w2: &Tensor<T>, y: &Tensor<T>) -> Result<(usize, usize, usize)> {
        let (rows, d_model) = matrix("x", x)?;
        let (d_ff, k) = matrix("w1", w_in[0])?;
        for (i, w) in w_in.iter().enumerate().skip(1) {
            if w.shape() != w_in[0].shape() {
                return Err(Error::Shape(format!("the input weights differ: {:?} and {:?} (weight {i})", w_in[0].shape(), w.shape())));
            }
        }
        if k != d_model {
            return Err(Error::Shape(format!("x is [{rows}, {d_model}] but w1 is [{d_ff}, {k}]: w1 must be [d_ff, {d_model}]")));
        }
        if w2.shape() != [d_model, d_ff] {
            return Err(Error::Shape(format!("w2 is {:?}, expected [d_model, d_ff] = [{d_model}, {d_ff}]", w2.shape())));
        }
        if y.shape() != [rows, d_model] {
            return Err(Error::Shape(format!("y is {:?}, expected [{rows}, {d_model}]", y.shape())));
        }
        Ok((rows, d_model, d_ff))
    }

    /// d_ff rounded up to whole 16-byte rows of `T`.
    fn padded_width<T: Elem>(d_ff: usize) -> usize {
        d_ff.next_multiple_of(16 / std::mem::size_of::<T>())
    }

    /// `w` `[r, c]` in the first rows and columns of a zeroed `[rows, cols]`.
    fn zero_padded<T: Elem>(gpu: &Gpu, w: &Tensor<T>, [rows, cols]: [usize; 2]) -> Result<Tensor<T>> {
        let (r, c) = matrix("weight", w)?;
        let mut out = gpu.alloc::<T>(&[rows, cols])?;
        gpu.fill_bytes(&mut out, 0)?;
        gpu.copy_rows(w, &mut out, [r, c], [c, cols])?;
        Ok(out)
    }

    /// Copies of an MLP's weights whose hidden width is padded with zeros to
    /// whole 16-byte rows: the input weights `[d_ff, d_model]` gain rows, `w2`
    /// `[d_model, d_ff]` columns. The MLP of the copies is the same function;
    /// pad once ahead and `mlp`/`gated_mlp` copy nothing per call.
    pub fn padded_weights<T: Elem>(gpu: &Gpu, w_in: &[&Tensor<T>], w2: &Tensor<T>) -> Result<(Vec<Tensor<T>>, Tensor<T>)> {
        let Some(&first) = w_in.first() else {
            return Err(Error::Shape("padded_weights: no input weights".into()));
        };
        let ((d_ff, d_model), (d_model2, d_ff2)) = (matrix("w_in[0]", first)?, matrix("w2", w2)?);
        if (d_model2, d_ff2) != (d_model, d_ff) {
            return Err(Error::Shape(format!("w2 is [{d_model2}, {d_ff2}], expected [d_model, d_ff] = [{d_model}, {d_ff}]")));
        }
        let d_ffp = padded_width::<T>(d_ff);
        let w_in = w_in.iter().map(|w| zero_padded(gpu, w, [d_ffp, d_model])).collect::<Result<_>>()?;
        Ok((w_in, zero_padded(gpu, w2, [d_model, d_ffp])?))
    }

    /// Runs `first` (which writes the `[rows, d_ffp]` hidden activations from
    /// the input weights padded to `d_ffp` rows), then `hidden·w2ᵀ` into `y`.
    fn two_gemms<T: Elem>(
        gpu: &Gpu, w_in: &[&Tensor<T>], w2: &Tensor<T>, y: &mut Tensor<T>, (rows, d_ff): (usize, usize),
        first: impl FnOnce(&[&Tensor<T>], &mut Tensor<T>) -> Result<()>,
    ) -> Result<()> {
        let d_ffp = padded_width::<T>(d_ff);
        let padded = if d_ffp == d_ff { None } else { Some(padded_weights(gpu, w_in, w2)?) };
        let (w_in, w2): (Vec<&Tensor<T>>, &Tensor<T>) = match &padded {
            Some((w_in, w2)) => (w_in.iter().collect(), w2),
            None => (w_in.to_vec(), w2),
        };
        let mut hidden = gpu.alloc::<T>(&[rows, d_ffp])?;
        first(&w_in, &mut hidden)?;
        gemm_nt(gpu, &hidden, w2, y)
    }

    /// `y = act(x·w1ᵀ)·w2ᵀ` on the GPU: `x` `[rows, d_model]`, `w1` `[d_ff, d_model]`,
    /// `w2` `[d_model, d_ff]`, `y` `[rows, d_model]`. `act(0)` must be 0 (every
    /// `Act` but the SiLU's backward).
    pub fn mlp<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w1: &Tensor<T>, act: Act, w2: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
        let (rows, _, d_ff) = mlp_shape(x, &[w1], w2, y)?;
        if act == Act::SiluGrad {
            return Err(Error::Invalid("mlp: the SiLU's backward is not an activation".into()));
        }
        two_gemms(gpu, &[w1], w2, y, (rows, d_ff), |w, hidden| gemm_nt_fused(gpu, x, w[0], hidden, &Epilogue::new().act(act)))
    }

    /// `y = (silu(x·w_gateᵀ) ⊙ x·w_upᵀ)·w2ᵀ` on the GPU (a SwiGLU MLP): the gate is one dual GEMM.
    pub fn gated_mlp<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w_gate: &Tensor<T>, w_up: &Tensor<T>, w2: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
        let (rows, _, d_ff) = mlp_shape(x, &[w_gate, w_up], w2, y)?;
        two_gemms(gpu, &[w_gate, w_up], w2, y, (rows, d_ff), |w, hidden| dual_gemm(gpu, x, w[0], w[1], hidden))
    }

    /// `mlp` in the CPU interpreter (row-major slices; the hidden activations rounded to `T`, as on the GPU).
    pub fn mlp_cpu<T: Elem>(x: &[T], w1: &[T], act: Act, w2: &[T], rows: usize, d_model: usize, d_ff: usize) -> Vec<T> {
        let mut hidden = vec![T::default(); rows * d_ff];
        let e = Epi { act, ..Epi::NONE };
        let cfg = crate::gemm::default_config(rows, d_ff);
        launch_plan_cpu(cfg, &Plan::nt(rows, d_ff, d_model), x, w1, &mut hidden, &[], &[], e);
        gemm_nt_cpu(&hidden, w2, rows, d_model, d_ff)
    }

    /// `gated_mlp` in the CPU interpreter.
    pub fn gated_mlp_cpu<T: Elem>(x: &[T], w_gate: &[T], w_up: &[T], w2: &[T], rows: usize, d_model: usize, d_ff: usize) -> Vec<T> {
        let hidden = dual_gemm_cpu(x, w_gate, w_up, rows, d_ff, d_model);
        gemm_nt_cpu(&hidden, w2, rows, d_model, d_ff)
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
