//! # Rustile: a tile language for GPU kernels, in Rust
//!
//! A kernel is one *program* (a thread block) working on tiles, as in
//! Triton. Its control flow is uniform across the program (loops over
//! blocks, branches on `program_id`); everything that differs per thread
//! happens inside the tile operations. That is what lets one source run on
//! two backends:
//!
//! * **GPU** (`nvptx64`): a [`Tile`] is each thread's fragment (see
//!   [`layout`]), reductions use warp shuffles and shared memory, memory
//!   moves in 16-byte vectors;
//! * **CPU interpreter** (every other target): a tile holds all its
//!   elements; programs run in parallel on a thread pool; every access is
//!   checked against its buffer.
//!
//! ```ignore
//! use rustile::prelude::*;
//!
//! #[kernel(configs = [(BLOCK = 2048, WARPS = 4)], grid = [cdiv(n, BLOCK)], dtypes = [f32, bf16])]
//! pub fn add<T: Elem>(x: Ptr<T>, y: Ptr<T>, out: PtrMut<T>, n: usize) {
//!     let at = [0, program_id(0) * BLOCK];
//!     let a = load(&BlockPtr::<T, 1, BLOCK>::rows(x, 1, n, at)).cast::<f32>();
//!     let b = load(&BlockPtr::<T, 1, BLOCK>::rows(y, 1, n, at)).cast::<f32>();
//!     store(&BlockPtr::rows(out, 1, n, at), &(a + b).cast::<T>());
//! }
//! ```
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![allow(incomplete_features)]
#![feature(generic_const_exprs)]

mod backend {
    #[cfg(not(target_arch = "nvptx64"))]
    mod cpu;
    #[cfg(not(target_arch = "nvptx64"))]
    pub use cpu::*;
    #[cfg(target_arch = "nvptx64")]
    mod gpu;
    #[cfg(target_arch = "nvptx64")]
    pub use gpu::*;
}
mod elem;
pub mod layout;
pub mod math;
pub mod mma;
mod ptr;
mod softmax;
mod tile;
pub mod tma;
pub mod tri;
pub mod wgmma;

pub use backend::{num_programs, program_id};
pub use elem::{bf16, e2m1_from_f32, e2m1_to_f32, f16, Elem, Kind, E2M1_MAX, F4E2M1x2, F8E4M3, F8E5M2};
pub use ptr::{for_each_strip, AsRaw, BlockPtr, Fetched, Ptr, PtrMut};
pub use rustile_macros::kernel;
pub use mma::{commit_copies, dot, dot_acc, dot_packed, dot_ta, dot_tab, dot_tb, store_acc, store_acc_staged, store_acc_staged_with, store_acc_stencil, store_acc_with, sync, sync_named, wait_copies, Acc, AccCols, AccRows, FragA, FragB, Packed, Shared, SharedF32, SharedVec};
pub use softmax::{AccSoftmax, OnlineSoftmax};
pub use tile::{len, load, load_or, store, Col, Row, Tile};

/// One point of a kernel's config space, as the `#[kernel]` macro records it.
#[derive(Clone, Copy, Debug)]
pub struct KernelConfig {
    /// `BLOCK2048_WARPS4`: the part of the entry name that names the config.
    pub name: &'static str,
    /// The config's values by name (`("BLOCK", 2048)`).
    pub params: &'static [(&'static str, usize)],
    /// Threads per program (32·WARPS).
    pub threads: u32,
    /// Dynamic shared memory per program, in bytes.
    pub smem_bytes: u32,
}

impl KernelConfig {
    /// The value of a config parameter, if the kernel has it.
    pub fn get(&self, key: &str) -> Option<usize> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Whole blocks needed to cover `n` items, `b` at a time.
#[inline(always)]
pub const fn cdiv(n: usize, b: usize) -> usize {
    n.div_ceil(b)
}

/// The `[row, col]` block of a `rows×cols` grid of output blocks that
/// program `pid` (0-based, in launch order) computes, walking the grid in
/// bands of `group` block rows, column by column within a band.
///
/// Programs that run at the same time then share a few row blocks and a few
/// column blocks of the operands, so a GEMM reads each from L2 instead of
/// device memory (row-major order would stream all of A once per wave).
#[inline(always)]
pub const fn grouped(pid: usize, rows: usize, cols: usize, group: usize) -> [usize; 2] {
    let per_band = group * cols;
    let first = (pid / per_band) * group;
    let height = if rows - first < group { rows - first } else { group };
    let at = pid % per_band;
    [first + at % height, at / height]
}

/// What a kernel module needs, in one import.
pub mod prelude {
    pub use crate::{bf16, cdiv, dot, dot_acc, dot_packed, dot_ta, dot_tab, dot_tb, f16, for_each_strip, grouped, kernel, load, load_or, math, num_programs, program_id, store, store_acc, store_acc_staged, store_acc_staged_with, store_acc_stencil, store_acc_with, sync, sync_named, commit_copies, wait_copies};
    pub use crate::mma::mma;
    pub use crate::{Acc, AccCols, AccRows, AccSoftmax, BlockPtr, Col, Elem, FragA, FragB, Fetched, Kind, OnlineSoftmax, Ptr, PtrMut, Row, Shared, SharedF32, SharedVec, Tile, F4E2M1x2, F8E4M3, F8E5M2};
}

/// Items the `#[kernel]` macro's expansion refers to; not for direct use.
#[doc(hidden)]
pub mod __private {
    #[cfg(not(target_arch = "nvptx64"))]
    pub use crate::backend::run_grid;
}

#[cfg(test)]
mod grouped_tests {
    use super::grouped;

    #[test]
    fn grouped_visits_every_block_once() {
        for (rows, cols, group) in [(1, 1, 8), (7, 5, 2), (33, 3, 8), (5, 9, 16), (16, 16, 4)] {
            let mut seen = vec![0; rows * cols];
            for pid in 0..rows * cols {
                let [r, c] = grouped(pid, rows, cols, group);
                assert!(r < rows && c < cols, "{rows}×{cols} group {group}: pid {pid} → [{r}, {c}]");
                seen[r * cols + c] += 1;
            }
            assert!(seen.iter().all(|&n| n == 1), "{rows}×{cols} group {group}: {seen:?}");
        }
        // Within a band, consecutive programs walk down the band's rows first.
        assert_eq!([grouped(0, 8, 8, 4), grouped(1, 8, 8, 4), grouped(4, 8, 8, 4)], [[0, 0], [1, 0], [0, 1]]);
    }
}
