//! `dst = srcᵀ` for a batch of row-major matrices: a weight's transposed
//! copy, so that a backward product `dy·W` reads it as `A·Bᵀ` (the layout
//! Hopper's kernels take) instead of running the `mma.sync` kernel.
//!
//! A program loads one `[BM, BN]` tile with whole-chunk loads and writes it
//! through a block pointer whose strides are swapped; the stores are
//! scalar (a chunk of the tile is a column of the output). Weights are
//! small beside activations, so this is cheap next to the products it
//! speeds up; staging through shared memory would make the stores whole
//! rows too.
use rustile::prelude::*;

#[kernel(
    configs = [(BM = 32, BN = 64, WARPS = 4)],
    grid = [cdiv(cols, BN), cdiv(rows, BM), batch],
    dtypes = [f32, bf16, f16],
)]
/// Matrix `z` of `batch` `[rows, cols]` matrices in `src` goes transposed
/// to matrix `z` of `[cols, rows]` ones in `dst`.
pub fn transpose_kernel<T: Elem>(src: Ptr<T>, dst: PtrMut<T>, rows: usize, cols: usize, batch: usize) {
    let (at, z) = ([program_id(1) * BM, program_id(0) * BN], program_id(2));
    if z >= batch {
        return; // (the grid has exactly `batch` layers)
    }
    let src = src.offset(z * rows * cols);
    let dst = dst.offset(z * rows * cols);
    let tile = load(&BlockPtr::<T, BM, BN>::rows(src, rows, cols, at));
    // Element (r, c) of the source at dst[c·rows + r].
    store(&BlockPtr::<T, BM, BN>::new(dst, [rows, cols], [1, rows], at), &tile);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use rustile_host::{Error, Gpu, Result, Tensor};

    fn dims(src: &[usize], dst: &[usize]) -> Result<(usize, usize, usize)> {
        let (batch, rows, cols) = match *src {
            [r, c] => (1, r, c),
            [b, r, c] => (b, r, c),
            _ => return Err(Error::Shape(format!("transpose: src must be [rows, cols] or [batch, rows, cols]; it is {src:?}"))),
        };
        let want: Vec<usize> = if src.len() == 2 { vec![cols, rows] } else { vec![batch, cols, rows] };
        if dst != want {
            return Err(Error::Shape(format!("transpose: dst must be {want:?} for src {src:?}; it is {dst:?}")));
        }
        Ok((batch, rows, cols))
    }

    /// `dst = srcᵀ` (each matrix of a batch), both contiguous.
    pub fn transpose<T: Elem>(gpu: &Gpu, src: &Tensor<T>, dst: &mut Tensor<T>) -> Result<()> {
        let (batch, rows, cols) = dims(src.shape(), dst.shape())?;
        if !src.is_contiguous() || !dst.is_contiguous() {
            return Err(Error::Shape("transpose: src and dst must be contiguous".into()));
        }
        transpose_kernel::launch(gpu, 0, src, dst, rows, cols, batch)
    }

    /// [`transpose`] in the CPU interpreter.
    pub fn transpose_cpu<T: Elem>(src: &[T], [batch, rows, cols]: [usize; 3]) -> Vec<T> {
        assert_eq!(src.len(), batch * rows * cols, "transpose_cpu: src holds {} values, not {batch}×{rows}×{cols}", src.len());
        let mut dst = vec![T::default(); src.len()];
        transpose_kernel::cpu(0, src, &mut dst, rows, cols, batch);
        dst
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{normal, rng, transpose as reference};

    #[test]
    fn transposes_odd_batches() {
        let (mut rng, seed) = rng();
        for [batch, rows, cols] in [[1, 1, 1], [1, 33, 65], [3, 100, 7], [2, 512, 1365]] {
            let x: Vec<f32> = normal(&mut rng, batch * rows * cols, 0.0, 1.0);
            assert_eq!(transpose_cpu(&x, [batch, rows, cols]), reference(&x, batch, rows, cols), "{batch}×{rows}×{cols} (seed {seed})");
        }
    }
}
