//! Triangular solves on f32 tiles in shared memory ([`SharedF32`]).
//!
//! A solve eliminates one column at a time, and each step needs the
//! previous one: done over a register tile, every step would be a
//! broadcast and a barrier. Here each thread owns whole columns of the
//! result instead, so a step is a thread's own multiply-adds against one
//! value every thread reads (a shared-memory broadcast): no barrier, no
//! shuffle, and with `N` a constant the loops unroll into exactly the
//! triangle's work (a warp skips the steps above its first column).
use crate::mma::SharedF32;

/// `out = (I + L)⁻¹` for `L` strictly lower triangular, given as its
/// transpose `lt` (row `j` of `lt` is column `j` of `L`; entries on and
/// below `lt`'s diagonal are not read): the inverse of a unit lower
/// triangular matrix, itself unit lower triangular. Column `c` of `out` is
/// thread `c`'s (threads past `N` idle; with fewer threads than columns,
/// each takes every `TH`-th). Call `sync()` after `lt` is written and
/// before `out` is read.
#[inline(always)]
pub fn invert_unit_lower<const N: usize, const TH: usize>(lt: &SharedF32<N, N, TH>, out: &SharedF32<N, N, TH>) {
    #[cfg(target_arch = "nvptx64")]
    let (first, step) = (rustile_device::thread_idx() as usize, TH);
    #[cfg(not(target_arch = "nvptx64"))]
    let (first, step) = (0, 1);
    let mut c = first;
    while c < N {
        // Column c of (I + L)⁻¹ solves (I + L)·x = e_c, top to bottom.
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
        for (i, xi) in x.iter().enumerate() {
            out.set(i, c, *xi);
        }
        c += step;
    }
}
