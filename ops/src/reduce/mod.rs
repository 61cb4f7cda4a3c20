//! Column sums of an f32 matrix in a fixed order: how the backward ops
//! reduce the partial sums their programs wrote (weight gradients, a mean
//! loss) without atomics, so a run gives the same bits every time.
use rustile::prelude::*;

// ---- kernel ----------------------------------------------------------------------------

#[kernel(
    configs = [(BM = 32, BN = 128, WARPS = 4)],
    grid = [cdiv(cols, BN)],
    dtypes = [f32],
)]
/// `dst[c] = scale · Σ_r src[first + r·ld + c]` for `rows × cols`: a program
/// takes `BN` columns and walks every row, `BM` at a time.
pub fn col_sum_kernel<T: Elem>(src: Ptr<f32>, dst: PtrMut<T>, rows: usize, cols: usize, ld: usize, first: usize, scale: f32) {
    let c0 = program_id(0) * BN;
    let view = |r0: usize| BlockPtr::<f32, BM, BN>::new(src.offset(first), [rows, cols], [ld, 1], [r0, c0]);
    let mut acc = Tile::<f32, BM, BN>::zeros();
    let mut r0 = 0;
    while r0 < rows {
        acc = acc + load(&view(r0));
        r0 += BM;
    }
    (acc.col_sum() * scale).cast::<T>().store(dst, c0, cols);
}

// ---- host API --------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use crate::check::expect_shape;
    use rustile_host::{Error, Gpu, Result, Tensor};

    fn check(len: usize, [rows, cols]: [usize; 2], [ld, first]: [usize; 2]) -> Result<()> {
        if rows > 0 && cols > 0 && (ld < cols || first + (rows - 1) * ld + cols > len) {
            return Err(Error::Shape(format!(
                "col_sum: {rows} rows of {cols} (row stride {ld}, from element {first}) do not fit a tensor of {len} values"
            )));
        }
        Ok(())
    }

    /// `dst = Σ_r src[r]` over `rows × cols` of `src`, rows `ld` apart from
    /// element `first` (`[ld, first]`), in a fixed order.
    pub fn col_sum(gpu: &Gpu, src: &Tensor<f32>, shape: [usize; 2], at: [usize; 2], dst: &mut Tensor<f32>) -> Result<()> {
        col_sum_scaled(gpu, src, shape, at, 1.0, dst)
    }

    /// [`col_sum`] times `scale`.
    pub fn col_sum_scaled(gpu: &Gpu, src: &Tensor<f32>, [rows, cols]: [usize; 2], [ld, first]: [usize; 2], scale: f32, dst: &mut Tensor<f32>) -> Result<()> {
        expect_shape("dst", dst, &[cols])?;
        check(src.numel(), [rows, cols], [ld, first])?;
        col_sum_kernel::launch(gpu, 0, src, dst, rows, cols, ld, first, scale)
    }

    /// [`col_sum`] in the CPU interpreter.
    pub fn col_sum_cpu(src: &[f32], [rows, cols]: [usize; 2], [ld, first]: [usize; 2]) -> Vec<f32> {
        check(src.len(), [rows, cols], [ld, first]).unwrap_or_else(|e| panic!("{e}"));
        let mut dst = vec![0.0; cols];
        col_sum_kernel::cpu(0, src, &mut dst, rows, cols, ld, first, 1.0);
        dst
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_strided_rows_in_order() {
        // 37 rows of 150 columns, rows 300 apart, from element 7 (a second matrix interleaved).
        let (rows, cols, ld, first) = (37, 150, 300, 7);
        let src: Vec<f32> = (0..first + rows * ld).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
        let got = col_sum_cpu(&src, [rows, cols], [ld, first]);
        for c in 0..cols {
            let want: f64 = (0..rows).map(|r| src[first + r * ld + c] as f64).sum();
            assert!((got[c] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()), "column {c}: {} vs {want}", got[c]);
        }
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn refuses_a_view_past_the_end() {
        col_sum_cpu(&[0.0; 10], [3, 4], [4, 0]);
    }
}
