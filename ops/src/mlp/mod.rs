//! MLP blocks on the GEMM family: `Y = act(X·W1ᵀ)·W2ᵀ` and the gated
//! (SwiGLU) form `Y = (silu(X·Wgᵀ) ⊙ X·Wuᵀ)·W2ᵀ`, with X `[rows, d_model]`,
//! W1, Wg, Wu `[d_ff, d_model]`, W2 `[d_model, d_ff]` (linear layers'
//! weights) and Y `[rows, d_model]`. Any sizes (d_ff = 1365 included).
//!
//! Today this is the two-kernel form: the first GEMM applies the activation
//! (or the SwiGLU gate, as one dual GEMM) in its epilogue and writes the
//! hidden activations once, `[rows, d_ff]` in `T`; the second GEMM reads
//! them. The single-kernel form that streams d_ff through on-chip memory
//! (the hidden activations never written) is the next step, and the tuner
//! will choose between them.
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

    /// `y = act(x·w1ᵀ)·w2ᵀ` on the GPU: `x` `[rows, d_model]`, `w1` `[d_ff, d_model]`,
    /// `w2` `[d_model, d_ff]`, `y` `[rows, d_model]`.
    pub fn mlp<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w1: &Tensor<T>, act: Act, w2: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
        let (rows, _, d_ff) = mlp_shape(x, &[w1], w2, y)?;
        let mut hidden = gpu.alloc::<T>(&[rows, d_ff])?;
        gemm_nt_fused(gpu, x, w1, &mut hidden, &Epilogue::new().act(act))?;
        gemm_nt(gpu, &hidden, w2, y)
    }

    /// `y = (silu(x·w_gateᵀ) ⊙ x·w_upᵀ)·w2ᵀ` on the GPU (a SwiGLU MLP): the gate is one dual GEMM.
    pub fn gated_mlp<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w_gate: &Tensor<T>, w_up: &Tensor<T>, w2: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
        let (rows, _, d_ff) = mlp_shape(x, &[w_gate, w_up], w2, y)?;
        let mut hidden = gpu.alloc::<T>(&[rows, d_ff])?;
        dual_gemm(gpu, x, w_gate, w_up, &mut hidden)?;
        gemm_nt(gpu, &hidden, w2, y)
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
