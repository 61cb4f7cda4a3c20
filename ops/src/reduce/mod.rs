//! Column sums of an f32 matrix in a fixed order: how the backward ops
//! reduce the partial sums their programs wrote (weight gradients, a mean
//! loss) without atomics, so a run gives the same bits every time.
use rustile::prelude::*;

// ---- kernel ----------------------------------------------------------------------------

#[kernel(
    configs = [(BM = 32, BN = 128, WARPS = 4)],
    grid = [cdiv(cols, BN), cdiv(rows, split)],
    dtypes = [f32],
)]
/// `dst[j·cols + c] = scale · Σ_r src[first + r·ld + c]` over rows
/// `j·split ..` of `rows × cols` (`j = program_id(1)`; `split` a multiple of
/// `BM`, or ≥ `rows` for one sum): a program takes `BN` columns and walks its
/// rows, `BM` at a time.
pub fn col_sum_kernel<T: Elem>(src: Ptr<f32>, dst: PtrMut<T>, rows: usize, cols: usize, ld: usize, first: usize, split: usize, scale: f32) {
    let (c0, j) = (program_id(0) * BN, program_id(1));
    let end = rows.min((j + 1) * split);
    let view = |r0: usize| BlockPtr::<f32, BM, BN>::new(src.offset(first), [end, cols], [ld, 1], [r0, c0]);
    let mut acc = Tile::<f32, BM, BN>::zeros();
    let mut r0 = j * split;
    while r0 < end {
        acc = acc + load(&view(r0));
        r0 += BM;
    }
    (acc.col_sum() * scale).cast::<T>().store(dst.offset(j * cols), c0, cols);
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
    /// element `first` (`[ld, first]`), in a fixed order, by one program a
    /// `BN` columns: for sums over few rows, or many columns
    /// ([`col_sum_split`] splits the rows too).
    pub fn col_sum(gpu: &Gpu, src: &Tensor<f32>, shape: [usize; 2], at: [usize; 2], dst: &mut Tensor<f32>) -> Result<()> {
        col_sum_scaled(gpu, src, shape, at, 1.0, dst)
    }

    /// [`col_sum`] times `scale`.
    pub fn col_sum_scaled(gpu: &Gpu, src: &Tensor<f32>, [rows, cols]: [usize; 2], [ld, first]: [usize; 2], scale: f32, dst: &mut Tensor<f32>) -> Result<()> {
        expect_shape("dst", dst, &[cols])?;
        check(src.numel(), [rows, cols], [ld, first])?;
        col_sum_kernel::launch(gpu, 0, src, dst, rows, cols, ld, first, rows.max(1), scale)
    }

    /// Programs a two-pass sum aims for: a few an SM of a large GPU.
    const PROGRAMS: usize = 512;
    /// The fewest rows a program of the first pass walks.
    const LEAST_ROWS: usize = 256;

    /// The rows each program of [`col_sum_split`]'s first pass walks for
    /// `rows × cols` (a multiple of 32), and how many such splits.
    fn split_of(rows: usize, cols: usize) -> (usize, usize) {
        let splits = PROGRAMS.div_ceil(cols.div_ceil(128)).clamp(1, rows.div_ceil(LEAST_ROWS).max(1));
        let split = rows.div_ceil(splits).next_multiple_of(32).max(32);
        (split, rows.div_ceil(split).max(1))
    }

    /// Values of the scratch [`col_sum_split`] needs for `rows × cols`.
    pub fn col_sum_split_len([rows, cols]: [usize; 2]) -> usize {
        let (_, splits) = split_of(rows, cols);
        if splits > 1 { splits * cols } else { 0 }
    }

    /// [`col_sum`] in two passes for sums over many rows: the rows split
    /// across programs into `part` (at least [`col_sum_split_len`] values),
    /// then those sums added. The order, and so the bits, depend only on the shape.
    pub fn col_sum_split(gpu: &Gpu, src: &Tensor<f32>, [rows, cols]: [usize; 2], at: [usize; 2], part: &mut Tensor<f32>, dst: &mut Tensor<f32>) -> Result<()> {
        let (split, splits) = split_of(rows, cols);
        if splits == 1 {
            return col_sum(gpu, src, [rows, cols], at, dst);
        }
        expect_shape("dst", dst, &[cols])?;
        check(src.numel(), [rows, cols], at)?;
        if part.numel() < splits * cols {
            return Err(Error::Shape(format!("col_sum_split: the scratch holds {} values; {rows} rows of {cols} need {}", part.numel(), splits * cols)));
        }
        col_sum_kernel::launch(gpu, 0, src, part, rows, cols, at[0], at[1], split, 1.0)?;
        col_sum(gpu, part, [splits, cols], [cols, 0], dst)
    }

    /// [`col_sum`] in the CPU interpreter.
    pub fn col_sum_cpu(src: &[f32], [rows, cols]: [usize; 2], [ld, first]: [usize; 2]) -> Vec<f32> {
        check(src.len(), [rows, cols], [ld, first]).unwrap_or_else(|e| panic!("{e}"));
        let mut dst = vec![0.0; cols];
        col_sum_kernel::cpu(0, src, &mut dst, rows, cols, ld, first, rows.max(1), 1.0);
        dst
    }

    /// [`col_sum_split`] in the CPU interpreter.
    pub fn col_sum_split_cpu(src: &[f32], [rows, cols]: [usize; 2], [ld, first]: [usize; 2]) -> Vec<f32> {
        let (split, splits) = split_of(rows, cols);
        check(src.len(), [rows, cols], [ld, first]).unwrap_or_else(|e| panic!("{e}"));
        let mut part = vec![0.0; splits * cols];
        col_sum_kernel::cpu(0, src, &mut part, rows, cols, ld, first, split, 1.0);
        col_sum_cpu(&part, [splits, cols], [cols, 0])
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
    fn sums_many_rows_in_two_passes() {
        // 5001 rows of 70 columns, rows 75 apart from element 3: 20 splits of 256 rows, the last short.
        let (rows, cols, ld, first) = (5001, 70, 75, 3);
        assert!(col_sum_split_len([rows, cols]) == 20 * cols);
        let src: Vec<f32> = (0..first + rows * ld).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
        let got = col_sum_split_cpu(&src, [rows, cols], [ld, first]);
        for c in 0..cols {
            let want: f64 = (0..rows).map(|r| src[first + r * ld + c] as f64).sum();
            assert!((got[c] as f64 - want).abs() < 1e-5 * rows as f64, "column {c}: {} vs {want}", got[c]);
        }
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn refuses_a_view_past_the_end() {
        col_sum_cpu(&[0.0; 10], [3, 4], [4, 0]);
    }
}
