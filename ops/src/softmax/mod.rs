//! Row softmax, `y = exp(x − max) / Σ exp(x − max)` along each row, for any
//! row length. A program takes RP blocks of BM rows. When a row fits one BN-wide tile it
//! is read once and written once; longer rows are seen tile by tile through
//! the online softmax (pass 1: running max and sum; pass 2: normalize).
use rustile::prelude::*;

// ---- kernel ----------------------------------------------------------------------------

row_kernel! {
grid = [cdiv(rows, BM * RP)],
/// Softmax of each row of a row-major `rows×cols` matrix. A program takes
/// `RP` consecutive blocks of `BM` rows and loads block k+1 before it reduces
/// block k, so memory stays busy while the program waits at its reductions.
pub fn softmax_kernel<T: Elem>(x: Ptr<T>, y: PtrMut<T>, rows: usize, cols: usize) {
    let first = program_id(0) * BM * RP;
    let src = |r0: usize| BlockPtr::<T, BM, BN>::rows(x, rows, cols, [r0, 0]);
    let dst = |r0: usize| BlockPtr::<T, BM, BN>::rows(y, rows, cols, [r0, 0]);
    if cols <= BN {
        // Each row fits one tile: read once, written once, next block in flight.
        let mut next = load_or(&src(first), f32::NEG_INFINITY);
        for k in 0..RP {
            let r0 = first + k * BM;
            if r0 >= rows {
                return;
            }
            let s = next.cast::<f32>();
            // The last block's successor belongs to the next program: not ours to read.
            if k + 1 < RP {
                next = load_or(&src(r0 + BM), f32::NEG_INFINITY);
            }
            let mut stats = OnlineSoftmax::<BM, BN>::new();
            let (p, _) = stats.step(s);
            store(&dst(r0), &(p * stats.l.recip()).cast::<T>());
        }
        return;
    }
    // Longer rows: running max and sum over the row's tiles, then normalize.
    for k in 0..RP {
        let r0 = first + k * BM;
        if r0 >= rows {
            return;
        }
        let mut stats = OnlineSoftmax::<BM, BN>::new();
        let mut c = 0;
        while c < cols {
            stats.push(load_or(&src(r0).advance([0, c]), f32::NEG_INFINITY).cast::<f32>());
            c += BN;
        }
        c = 0;
        while c < cols {
            let s = load_or(&src(r0).advance([0, c]), f32::NEG_INFINITY).cast::<f32>();
            store(&dst(r0).advance([0, c]), &stats.probs(s).cast::<T>());
            c += BN;
        }
    }
}
}

// ---- config choice and host API ----------------------------------------------------------

/// The config `softmax` runs for rows of `cols` elements of `T`
/// (`crate::row_config`). At 8192×8192 on the H100 (bench/RESULTS.md), bf16
/// and f16 measured 96.1 and 96.6 µs with one row a program and three
/// programs an SM (RP = 1, OCC = 3), against 100.8 µs for RP = 2, OCC = 2 and
/// 115.3 µs for RP = 1, OCC = 1. f32 (twice the registers) takes RP = 2, OCC = 1.
#[cfg(not(target_arch = "nvptx64"))]
pub fn default_config<T: Elem>(cols: usize) -> usize {
    let at_8192 = if T::KIND == Kind::F32 { (2, 1) } else { (1, 3) };
    crate::row_config(softmax_kernel::CONFIGS, cols, at_8192)
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use rustile_host::{Gpu, Result, Tensor};

    /// `y = softmax(x, dim = -1)` for a 2-D row-major `x`.
    pub fn softmax<T: Elem>(gpu: &Gpu, x: &Tensor<T>, y: &mut Tensor<T>) -> Result<()> {
        let (rows, cols) = crate::check::matrix("x", x)?;
        crate::check::expect_shape("y", y, &[rows, cols])?;
        if rows * cols == 0 {
            return Ok(()); // no rows, or rows of no elements: y is empty too
        }
        softmax_kernel::launch(gpu, default_config::<T>(cols), x, y, rows, cols)
    }

    /// Softmax of each row in the CPU interpreter.
    pub fn softmax_cpu<T: Elem>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
        assert_eq!(x.len(), rows * cols, "softmax: x holds {} elements, not {rows}×{cols}", x.len());
        let mut y = vec![T::default(); x.len()];
        softmax_kernel::cpu(default_config::<T>(cols), x, &mut y, rows, cols);
        y
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
