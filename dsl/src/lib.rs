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

pub use backend::{num_programs, program_id};
pub use elem::{bf16, f16, Elem, F8E4M3, F8E5M2};
pub use ptr::{AsRaw, BlockPtr, Ptr, PtrMut};
pub use rustile_macros::kernel;
pub use mma::{commit_copies, dot, store_acc, sync, wait_copies, Acc, Shared};
pub use softmax::OnlineSoftmax;
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

/// What a kernel module needs, in one import.
pub mod prelude {
    pub use crate::{bf16, cdiv, dot, f16, kernel, load, load_or, math, num_programs, program_id, store, store_acc, sync, commit_copies, wait_copies};
    pub use crate::{Acc, BlockPtr, Col, Elem, OnlineSoftmax, Ptr, PtrMut, Row, Shared, Tile, F8E4M3, F8E5M2};
}

/// Items the `#[kernel]` macro's expansion refers to; not for direct use.
#[doc(hidden)]
pub mod __private {
    #[cfg(not(target_arch = "nvptx64"))]
    pub use crate::backend::run_grid;
}
