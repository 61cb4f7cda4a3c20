//! Triangular solves on f32 tiles in shared memory ([`SharedF32`]).
//!
//! A solve eliminates one column at a time, and each step needs the
//! previous one: done over a register tile, every step would be a
//! broadcast and a barrier. Here each thread owns a column of the result
//! instead, so a step is a thread's own multiply-adds against one value
//! every thread reads (a shared-memory broadcast): no barrier or shuffle
//! until the columns are written, and with `N` a constant the loops unroll
//! into exactly the triangle's work (a warp skips the steps above its first
//! column).
use crate::mma::SharedF32;

/// `(I + L)⁻¹` for `L` strictly lower triangular, given as its transpose
/// `lt` (row `j` of `lt` is column `j` of `L`; entries on and below `lt`'s
/// diagonal are not read), written over `lt`: the inverse of a unit lower
/// triangular matrix, itself unit lower triangular. Column `c` is thread
/// `c`'s (threads past `N` idle), held in registers until every thread has
/// read `lt` (a barrier inside: every thread of the program calls it), so
/// the solve needs no second tile. Call `sync()` after `lt` is written and
/// before the inverse is read.
#[inline(always)]
pub fn invert_unit_lower_in_place<const N: usize, const TH: usize>(lt: &SharedF32<N, N, TH>) {
    let () = Columns::<N, TH>::OK;
    #[cfg(target_arch = "nvptx64")]
    {
        let c = rustile_device::thread_idx() as usize;
        let x = if c < N { column(lt, c) } else { [0.0; N] };
        crate::mma::sync();
        if c < N {
            for (i, xi) in x.iter().enumerate() {
                lt.set(i, c, *xi);
            }
        }
    }
    // The interpreter's one thread solves every column before writing any.
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let cols: [[f32; N]; N] = core::array::from_fn(|c| column(lt, c));
        for (c, x) in cols.iter().enumerate() {
            for (i, xi) in x.iter().enumerate() {
                lt.set(i, c, *xi);
            }
        }
    }
}

/// Compile-time check: a thread for every column.
struct Columns<const N: usize, const TH: usize>;
impl<const N: usize, const TH: usize> Columns<N, TH> {
    const OK: () = assert!(TH >= N, "invert_unit_lower_in_place: one thread a column (TH >= N)");
}

/// Column `c` of `(I + L)⁻¹`: `(I + L)·x = e_c`, top to bottom.
#[inline(always)]
fn column<const N: usize, const TH: usize>(lt: &SharedF32<N, N, TH>, c: usize) -> [f32; N] {
    let mut x = [0.0f32; N];
    for (i, xi) in x.iter_mut().enumerate() {
        *xi = if i == c { 1.0 } else { 0.0 };
    }
    // x[j] is zero for j < c, so those steps change nothing. A warp's
    // columns are consecutive: steps before its first column are skipped
    // by a branch the whole warp takes alike (on the CPU, the same rule).
    let zero_above = c - c % 32;
    for j in 0..N {
        if j < zero_above {
            continue;
        }
        let xj = x[j];
        // Column j of L below the diagonal, four values a read (the
        // transpose makes them neighbours; the first group starts at
        // or before row j + 1, and rows up to j are skipped, at compile time).
        let mut i0 = (j + 1) / 4 * 4;
        while i0 < N {
            let l = lt.get4(j, i0);
            for (d, ld) in l.iter().enumerate() {
                if i0 + d > j {
                    x[i0 + d] -= ld * xj;
                }
            }
            i0 += 4;
        }
    }
    x
}
