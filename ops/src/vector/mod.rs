//! Elementwise ops over flat tensors: `add` (x + y) and the SwiGLU
//! activation `silu(a) · b`. Each program handles BLOCK consecutive elements
//! as one 1×BLOCK tile; the tail block is masked.
use rustile::prelude::*;

// ---- kernels ---------------------------------------------------------------------------

/// out = x + y, elementwise.
#[kernel(
    configs = [(BLOCK = 2048, WARPS = 8), (BLOCK = 4096, WARPS = 8), (BLOCK = 8192, WARPS = 8), (BLOCK = 8192, WARPS = 16)],
    grid = [cdiv(n, BLOCK)],
    dtypes = [f32, bf16, f16],
)]
pub fn add_kernel<T: Elem>(x: Ptr<T>, y: Ptr<T>, out: PtrMut<T>, n: usize) {
    let at = [0, program_id(0) * BLOCK];
    let a = load(&BlockPtr::<T, 1, BLOCK>::rows(x, 1, n, at)).cast::<f32>();
    let b = load(&BlockPtr::<T, 1, BLOCK>::rows(y, 1, n, at)).cast::<f32>();
    store(&BlockPtr::rows(out, 1, n, at), &(a + b).cast::<T>());
}

/// out = silu(a) · b, elementwise (the gate of a SwiGLU MLP).
#[kernel(
    configs = [(BLOCK = 2048, WARPS = 8), (BLOCK = 4096, WARPS = 8), (BLOCK = 8192, WARPS = 8), (BLOCK = 8192, WARPS = 16)],
    grid = [cdiv(n, BLOCK)],
    dtypes = [f32, bf16, f16],
)]
pub fn swiglu_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, out: PtrMut<T>, n: usize) {
    let at = [0, program_id(0) * BLOCK];
    let gate = load(&BlockPtr::<T, 1, BLOCK>::rows(a, 1, n, at)).cast::<f32>();
    let up = load(&BlockPtr::<T, 1, BLOCK>::rows(b, 1, n, at)).cast::<f32>();
    store(&BlockPtr::rows(out, 1, n, at), &(gate.silu() * up).cast::<T>());
}

/// out = silu(x), elementwise: a layer's activation kept beside its input
/// (a training step saves both: the next GEMM reads `silu(x)`, the backward
/// `silu'(x)`).
#[kernel(
    configs = [(BLOCK = 2048, WARPS = 8)],
    grid = [cdiv(n, BLOCK)],
    dtypes = [f32, bf16, f16],
)]
pub fn silu_kernel<T: Elem>(x: Ptr<T>, out: PtrMut<T>, n: usize) {
    let at = [0, program_id(0) * BLOCK];
    let a = load(&BlockPtr::<T, 1, BLOCK>::rows(x, 1, n, at)).cast::<f32>();
    store(&BlockPtr::rows(out, 1, n, at), &a.silu().cast::<T>());
}

// ---- host API --------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::expect_shape;
    use rustile_host::{Gpu, Result, Tensor};

    /// The default config: 2048 elements a program, one 16-byte (bf16) chunk per
    /// thread per operand; the fastest on the H100 at 2^28 elements (bench/RESULTS.md).
    pub const DEFAULT_CONFIG: usize = 0;

    /// `out = x + y` on the GPU; all three of one shape, contiguous.
    pub fn add<T: Elem>(gpu: &Gpu, x: &Tensor<T>, y: &Tensor<T>, out: &mut Tensor<T>) -> Result<()> {
        expect_shape("x", x, x.shape())?;
        expect_shape("y", y, x.shape())?;
        expect_shape("out", out, x.shape())?;
        add_kernel::launch(gpu, DEFAULT_CONFIG, x, y, out, x.numel())
    }

    /// `out = silu(a) · b` on the GPU; all three of one shape, contiguous.
    pub fn swiglu<T: Elem>(gpu: &Gpu, a: &Tensor<T>, b: &Tensor<T>, out: &mut Tensor<T>) -> Result<()> {
        expect_shape("a", a, a.shape())?;
        expect_shape("b", b, a.shape())?;
        expect_shape("out", out, a.shape())?;
        swiglu_kernel::launch(gpu, DEFAULT_CONFIG, a, b, out, a.numel())
    }

    /// `out = silu(x)` on the GPU; both of one shape, contiguous.
    pub fn silu<T: Elem>(gpu: &Gpu, x: &Tensor<T>, out: &mut Tensor<T>) -> Result<()> {
        expect_shape("x", x, x.shape())?;
        expect_shape("out", out, x.shape())?;
        silu_kernel::launch(gpu, 0, x, out, x.numel())
    }

    /// `x + y` in the CPU interpreter.
    pub fn add_cpu<T: Elem>(x: &[T], y: &[T]) -> Vec<T> {
        assert_eq!(x.len(), y.len(), "add: x and y differ in length");
        let mut out = vec![T::default(); x.len()];
        add_kernel::cpu(DEFAULT_CONFIG, x, y, &mut out, x.len());
        out
    }

    /// `silu(a) · b` in the CPU interpreter.
    pub fn swiglu_cpu<T: Elem>(a: &[T], b: &[T]) -> Vec<T> {
        assert_eq!(a.len(), b.len(), "swiglu: a and b differ in length");
        let mut out = vec![T::default(); a.len()];
        swiglu_kernel::cpu(DEFAULT_CONFIG, a, b, &mut out, a.len());
        out
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
